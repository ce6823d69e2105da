/* replay.c - batch replay to the end: one bounded replay_many at a time. */
#include "retryd/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

typedef struct replay_all {
    rd_store_t *st;
    char *queue;
    size_t queue_len;
    const char *mode, *needle;  /* borrowed until the callback */
    const long long *ids;
    size_t n;
    char *cursor;               /* where the next call starts; for ids, the offset */
    long long replayed;         /* so far */
    bool (*go_on)(void *arg);
    rd_store_replayed_cb cb;
    void *arg;
} replay_all_t;

static void on_replay_batch(const rd_store_replayed_t *res, void *arg);

static int replay_batch(replay_all_t *r)
{
    rd_store_queue_t q = { .name = r->queue, .len = r->queue_len };
    if (strcmp(r->mode, "ids") == 0) {
        size_t from = r->cursor ? strtoul(r->cursor, NULL, 10) : 0;
        size_t n = r->n - from < RD_STORE_REPLAY_IDS_MAX ? r->n - from : RD_STORE_REPLAY_IDS_MAX;
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
    rd_free(r->queue);
    rd_free(r);
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
    if (strcmp(r->mode, "ids") == 0) {
        size_t from = (r->cursor ? strtoul(r->cursor, NULL, 10) : 0) + RD_STORE_REPLAY_IDS_MAX;
        next.len = from < r->n ? (size_t)snprintf(offset, sizeof offset, "%zu", from) : 0;
        next.ptr = offset;
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
    r->ids = ids;
    r->n = n;
    r->go_on = go_on;
    r->cb = cb;
    r->arg = arg;
    int rc = replay_batch(r);
    if (rc != 0) {
        rd_free(r->queue);
        rd_free(r);
    }
    return rc;
}
