/* replay.c - batch replay to the end: one bounded replay_many at a time.
 * A sharded queue (docs/sharding.md "Every API over all shards") is walked
 * shard by shard, 0 first, with the layout read from shard 0 before the
 * first call; each letter is replayed on the shard it died on. Ids are
 * sorted by their shard first (stably: each shard's in the order given). */
#include "retryd/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/shard_view.h"
#include "retryd/shards.h"

typedef struct replay_all {
    rd_store_t *st;
    char *queue;
    size_t queue_len;
    const char *mode, *needle;  /* borrowed until the callback */
    long long *ids;             /* owned, by shard */
    size_t n;
    size_t ends[RD_SHARDS_MAX]; /* ids: shard k's are ids[ends[k-1]..ends[k]) */
    rd_shard_view_t view;       /* as read at the start (n 1: one shard) */
    int shard;                  /* the shard being replayed: 0 up to view.n - 1 */
    char *cursor;               /* where the next call starts in the shard; for ids, the offset */
    long long replayed;         /* so far */
    bool (*go_on)(void *arg);
    rd_store_replayed_cb cb;
    void *arg;
} replay_all_t;

static void on_replay_batch(const rd_store_replayed_t *res, void *arg);

static bool by_ids(const replay_all_t *r)
{
    return strcmp(r->mode, "ids") == 0;
}

/* Where shard k's ids end (ids of no shard: shard 0's, where they are not found). */
static size_t shard_end(const replay_all_t *r)
{
    return r->view.n > 1 ? r->ends[r->shard] : r->n;
}

static size_t ids_offset(const replay_all_t *r)
{
    return r->cursor ? strtoul(r->cursor, NULL, 10) : r->shard > 0 ? r->ends[r->shard - 1] : 0;
}

static int replay_batch(replay_all_t *r)
{
    rd_store_queue_t q = rd_shard_view_at(r->view.n > 1 ? &r->view : NULL,
                                          (rd_store_queue_t){ .name = r->queue, .len = r->queue_len },
                                          r->shard);
    if (by_ids(r)) {
        size_t from = ids_offset(r), end = shard_end(r);
        size_t n = end - from < RD_STORE_REPLAY_IDS_MAX ? end - from : RD_STORE_REPLAY_IDS_MAX;
        return rd_store_replay_many(r->st, q, r->mode, r->ids + from, n, 0, NULL, NULL,
                                    on_replay_batch, r);
    }
    return rd_store_replay_many(r->st, q, r->mode, NULL, 0, RD_STORE_REPLAY_IDS_MAX, r->cursor,
                                r->needle, on_replay_batch, r);
}

static void replay_all_end(replay_all_t *r, rd_store_replayed_t *res)
{
    res->replayed = r->replayed;
    r->cb(res, r->arg);
    rd_free(r->cursor);
    rd_free(r->ids);
    rd_free(r->queue);
    rd_free(r);
}

/* The next shard with something to walk (ids: one with ids), its walk from
 * the start; false after the last. */
static bool next_shard(replay_all_t *r)
{
    rd_free(r->cursor);
    r->cursor = NULL;
    while (++r->shard < r->view.n)
        if (!by_ids(r) || r->ends[r->shard] > (r->shard > 0 ? r->ends[r->shard - 1] : 0))
            return true;
    return false;
}

/* One bounded call at a time, so other clients' commands interleave between
 * them. Stops when go_on says so (the client has gone), and when a call
 * neither replayed anything nor moved the cursor (a library that cannot make
 * progress, e.g. an older one during an upgrade) instead of calling again
 * forever. */
static void on_replay_batch(const rd_store_replayed_t *res, void *arg)
{
    replay_all_t *r = arg;
    if (res->head.status != RD_STORE_OK) {
        if (r->replayed > 0) rd_warn("store: batch replay stopped after %lld replayed", r->replayed);
        rd_store_replayed_t out = *res;
        replay_all_end(r, &out);
        return;
    }
    r->replayed += res->replayed;
    rd_str_t next = res->next_cursor;
    char offset[24];
    if (by_ids(r)) {
        size_t from = ids_offset(r) + RD_STORE_REPLAY_IDS_MAX;
        next.len = from < shard_end(r) ? (size_t)snprintf(offset, sizeof offset, "%zu", from) : 0;
        next.ptr = offset;
    }
    if (next.len == 0 && next_shard(r)) {
        if (r->go_on && !r->go_on(r->arg)) {
            rd_store_replayed_t gone = { .head.status = RD_STORE_UNAVAILABLE };
            replay_all_end(r, &gone);
            return;
        }
        if (replay_batch(r) == 0) return;
        rd_store_replayed_t failed = { .head.status = RD_STORE_UNAVAILABLE };
        replay_all_end(r, &failed);
        return;
    }
    rd_store_replayed_t out = { .head.status = RD_STORE_OK };
    if (next.len > 0 && r->go_on && !r->go_on(r->arg)) {
        rd_info("store: batch replay stopped after %lld replayed: the client has gone",
                r->replayed);
        out.head.status = RD_STORE_UNAVAILABLE;
        replay_all_end(r, &out);
        return;
    }
    if (next.len > 0 && res->replayed == 0 && r->cursor && strlen(r->cursor) == next.len &&
        memcmp(r->cursor, next.ptr, next.len) == 0) {
        char detail[160];
        out.head.status = RD_STORE_ERROR;
        out.head.detail.ptr = detail;
        out.head.detail.len = (size_t)snprintf(detail, sizeof detail,
                                               "replay_many made no progress at cursor %.64s "
                                               "after %lld replayed; stopped", r->cursor,
                                               r->replayed);
        replay_all_end(r, &out);
        return;
    }
    if (next.len > 0) {
        rd_free(r->cursor);
        r->cursor = rd_strndup(next.ptr, next.len);
        if (replay_batch(r) == 0) return;
        out.head.status = RD_STORE_UNAVAILABLE;
    }
    replay_all_end(r, &out);
}

/* ids in shard order, stably, and where each shard's end. */
static void sort_by_shard(replay_all_t *r, const long long *ids)
{
    size_t at = 0;
    for (int k = 0; k < r->view.n; k++) {
        for (size_t i = 0; i < r->n; i++) {
            int of = rd_shards_of_id(ids[i]);
            if (of == k || (k == 0 && (of < 0 || of >= r->view.n))) r->ids[at++] = ids[i];
        }
        r->ends[k] = at;
    }
}

/* The layout is read: the walk starts at shard 0, or at the first with ids. */
static void on_view_read(const rd_store_head_t *res, void *arg)
{
    replay_all_t *r = arg;
    rd_store_replayed_t out = { .head = *res };
    if (res->status != RD_STORE_OK) {
        replay_all_end(r, &out);
        return;
    }
    const rd_shard_view_t *v =
        rd_store_view(r->st, (rd_store_queue_t){ .name = r->queue, .len = r->queue_len });
    r->view = v ? *v : (rd_shard_view_t){ .n = 1 };
    if (by_ids(r) && r->view.n > 1) {
        long long *given = r->ids;
        r->ids = rd_malloc((r->n ? r->n : 1) * sizeof *r->ids);
        sort_by_shard(r, given);
        rd_free(given);
        r->shard = -1;
        if (!next_shard(r)) {   /* no ids at all */
            out.head.status = RD_STORE_OK;
            replay_all_end(r, &out);
            return;
        }
    }
    if (replay_batch(r) == 0) return;
    out.head.status = RD_STORE_UNAVAILABLE;
    replay_all_end(r, &out);
}

int rd_replay_all(rd_store_t *st, rd_store_queue_t q, const char *mode, const long long *ids,
                  size_t n, const char *needle, bool (*go_on)(void *arg),
                  rd_store_replayed_cb cb, void *arg)
{
    replay_all_t *r = rd_calloc(1, sizeof *r);
    r->st = st;
    r->queue = rd_strndup(q.name, q.len);
    r->queue_len = q.len;
    r->mode = mode;
    r->needle = needle;
    r->n = n;
    if (n > 0) {
        r->ids = rd_malloc(n * sizeof *r->ids);
        memcpy(r->ids, ids, n * sizeof *r->ids);
    }
    r->go_on = go_on;
    r->cb = cb;
    r->arg = arg;
    int rc = rd_store_read_view(st, q, on_view_read, r);
    if (rc != 0) {
        rd_free(r->ids);
        rd_free(r->queue);
        rd_free(r);
    }
    return rc;
}
