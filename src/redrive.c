/* redrive.c - dead letters of one queue into another, exactly once.
 *
 * The source and the target may live on different Redis Cluster masters, so
 * no single atomic call can do both. Each batch is four calls, each one
 * atomic function in one slot (lua/65_redrive.lua), and this file only
 * sequences them:
 *   1. redrive_take   (source) dead -> redriving, the target recorded
 *   2. redrive_in     (target) idempotent enqueue, keyed by source queue + id
 *   3. redrive_done   (source) the letters leave the source
 *   4. redrive_forget (target) the idempotency keys expire a day later
 * A call cut anywhere leaves letters in redriving, which the next take on
 * the source answers first (with their recorded target); step 2 answers the
 * same new id again, so each letter lands in its target once.
 *
 * A sharded source (docs/sharding.md "Every API over all shards") is walked
 * shard by shard, 0 first, with its layout read from shard 0 before the
 * first take: the take, the done and the letters' source are that shard's
 * (ids given are sorted by their shard first, stably). The target is the
 * queue's own base: a redriven letter enqueued there is claimed like any
 * other message of the target. */
#include "retryd/redrive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/shard_view.h"
#include "retryd/shards.h"

/* Ids given to one take (its reply may use fewer, and says how many). */
enum { TAKE_IDS_MAX = RD_STORE_REPLAY_IDS_MAX, TAKE_LIMIT = 1000, STALLS_MAX = 3 };

typedef struct letter {
    long long id, new_id;
    char *target;               /* owned */
    size_t target_len;
    long long max_retries;
    char *payload;              /* owned */
    size_t payload_len;
    long long priority;
    char *history;              /* owned: opaque, as redrive_take answered it */
    size_t history_len;
} letter_t;

typedef struct rd_redrive {
    rd_store_t *st;
    char *source, *target;      /* owned */
    size_t source_len, target_len;
    const char *mode, *needle;  /* borrowed */
    const long long *ids;       /* borrowed; on a sharded source, own_ids */
    long long *own_ids;         /* the ids by shard (a sharded source) */
    size_t n, offset;           /* ids: how many ids are done */
    size_t end;                 /* ids: where the shard's ids end */
    rd_shard_view_t view;       /* the source's, read at the start (n 1: one shard) */
    int shard;                  /* the source's shard being walked */
    size_t given;               /* ids: how many the last take was given */
    char *cursor;               /* all/error: where the next take starts (NULL first) */
    long long moved;
    int stalls;                 /* batches in a row that moved nothing */
    bool (*go_on)(void *arg);
    int limit;                  /* all/error/move: dead letters a take looks at */
    rd_redrive_gate_cb gate;    /* paced: asked before each take after the first */
    long long reported;         /* moved as the gate last heard it */
    bool halted;                /* the gate's caller ended it: no warning */
    rd_store_replayed_cb cb;
    void *arg;
    /* the batch in hand */
    letter_t *letters;
    size_t count, run, run_end;
    bool resumed;
    char *next;                 /* the take's next ("" done) */
} redrive_t;

static int take(redrive_t *r);

static void free_batch(redrive_t *r)
{
    for (size_t i = 0; i < r->count; i++) {
        rd_free(r->letters[i].target);
        rd_free(r->letters[i].payload);
        rd_free(r->letters[i].history);
    }
    rd_free(r->letters);
    r->letters = NULL;
    r->count = 0;
    rd_free(r->next);
    r->next = NULL;
}

static void finish(redrive_t *r, rd_store_status_t status, const char *detail)
{
    rd_store_replayed_t out = { .head.status = status, .replayed = r->moved };
    if (detail) out.head.detail = (rd_str_t){ detail, strlen(detail) };
    if (status != RD_STORE_OK && r->moved > 0 && !r->halted)
        rd_warn("redrive: %.*s -> %.*s stopped after %lld moved", (int)r->source_len, r->source,
                (int)r->target_len, r->target, r->moved);
    r->cb(&out, r->arg);
    free_batch(r);
    rd_free(r->cursor);
    rd_free(r->own_ids);
    rd_free(r->source);
    rd_free(r->target);
    rd_free(r);
}

/* A call's head that is not OK ends the redrive with it; detail copied. */
static bool failed(redrive_t *r, const rd_store_head_t *head)
{
    if (head->status == RD_STORE_OK) return false;
    char detail[200];
    snprintf(detail, sizeof detail, "%.*s", (int)head->detail.len,
             head->detail.ptr ? head->detail.ptr : "");
    finish(r, head->status, detail);
    return true;
}

static rd_store_queue_t source_q(const redrive_t *r)
{
    return rd_shard_view_at(r->view.n > 1 ? &r->view : NULL,
                            (rd_store_queue_t){ .name = r->source, .len = r->source_len },
                            r->shard);
}

/* ids: where shard k's ids end in r->ids. */
static size_t ids_end(const redrive_t *r, int k)
{
    if (r->view.n <= 1) return r->n;
    size_t end = 0;
    for (size_t i = 0; i < r->n; i++) {
        int of = rd_shards_of_id(r->ids[i]);
        end += (of >= 0 && of < r->view.n ? of : 0) <= k;
    }
    return end;
}

/* The source's walk goes on at its next shard (ids: the next with ids);
 * false after the last. */
static bool next_shard(redrive_t *r)
{
    while (++r->shard < r->view.n) {
        rd_free(r->cursor);
        r->cursor = NULL;
        if (strcmp(r->mode, "ids") != 0) return true;
        r->offset = r->end;
        r->end = ids_end(r, r->shard);
        if (r->end > r->offset) return true;
    }
    return false;
}

/* After a batch (or an empty take): on to the next take, or the end. */
static void advance(redrive_t *r, bool progressed)
{
    bool done = false;
    if (!r->resumed) {
        /* A selection that moved on (ids used, a new cursor) is progress
         * even when it matched nothing; one that stood still and took
         * nothing would be called again forever. */
        size_t next_len = strlen(r->next);
        if (strcmp(r->mode, "ids") == 0) {
            r->offset += next_len ? strtoul(r->next, NULL, 10) : r->given;
            done = r->offset >= r->end && !next_shard(r);
        } else if (next_len == 0) {
            done = !next_shard(r);
        } else {
            if (r->cursor && strcmp(r->cursor, r->next) == 0 && !progressed) {
                free_batch(r);
                finish(r, RD_STORE_ERROR, "redrive_take made no progress");
                return;
            }
            rd_free(r->cursor);
            r->cursor = rd_strdup(r->next);
        }
        progressed = true;
    }
    r->stalls = progressed ? 0 : r->stalls + 1;
    free_batch(r);
    if (done) {
        finish(r, RD_STORE_OK, NULL);
        return;
    }
    if (r->stalls >= STALLS_MAX) {
        finish(r, RD_STORE_ERROR, "redrive made no progress");
        return;
    }
    if (r->gate) {
        long long batch = r->moved - r->reported;
        r->reported = r->moved;
        r->gate(r, batch, r->arg);   /* it answers rd_redrive_resume */
        return;
    }
    if (r->go_on && !r->go_on(r->arg)) {
        rd_info("redrive: %.*s stopped after %lld moved: the client has gone",
                (int)r->source_len, r->source, r->moved);
        finish(r, RD_STORE_UNAVAILABLE, NULL);
        return;
    }
    if (take(r) != 0) finish(r, RD_STORE_UNAVAILABLE, NULL);
}

static void on_forgotten(const rd_store_count_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK)
        rd_debug("redrive: redrive_forget failed; its keys stay until the next redrive");
}

/* Step 4 for letters [from, to) (one target), fire and forget. */
static void forget(redrive_t *r, size_t from, size_t to)
{
    long long *ids = rd_calloc(to - from, sizeof *ids);
    for (size_t i = from; i < to; i++) ids[i - from] = r->letters[i].id;
    rd_store_queue_t q = { .name = r->letters[from].target, .len = r->letters[from].target_len };
    rd_store_redrive_forget(r->st, q, source_q(r), to - from, ids, on_forgotten, NULL);
    rd_free(ids);
}

static void on_done(const rd_store_count_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, &res->head)) return;
    long long left = res->n;
    for (size_t from = 0; from < r->count;) {
        size_t to = from + 1;
        while (to < r->count && r->letters[to].target_len == r->letters[from].target_len &&
               memcmp(r->letters[to].target, r->letters[from].target,
                      r->letters[from].target_len) == 0)
            to++;
        forget(r, from, to);
        from = to;
    }
    r->moved += (long long)r->count;
    advance(r, r->count > 0 || left > 0);
}

/* Step 3: every letter of the batch leaves the source. */
static void send_done(redrive_t *r)
{
    long long *ids = rd_calloc(r->count, sizeof *ids);
    long long *new_ids = rd_calloc(r->count, sizeof *new_ids);
    for (size_t i = 0; i < r->count; i++) {
        ids[i] = r->letters[i].id;
        new_ids[i] = r->letters[i].new_id;
    }
    if (rd_store_redrive_done(r->st, source_q(r), r->count, ids, new_ids, on_done, r) != 0)
        finish(r, RD_STORE_UNAVAILABLE, NULL);
    rd_free(new_ids);
    rd_free(ids);
}

static void send_run(redrive_t *r);

static void on_in(const rd_store_ids_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, &res->head)) return;
    size_t n = r->run_end - r->run;
    if (res->count != n) {
        char detail[120];
        snprintf(detail, sizeof detail, "unexpected reply to redrive_in: %zu ids for %zu letters",
                 res->count, n);
        rd_error("redrive: %s (another version of the library?)", detail);
        finish(r, RD_STORE_ERROR, detail);
        return;
    }
    for (size_t i = 0; i < n; i++) r->letters[r->run + i].new_id = res->ids[i];
    r->run = r->run_end;
    if (r->run < r->count) send_run(r);
    else send_done(r);
}

/* Step 2 for the next run of letters with one target. */
static void send_run(redrive_t *r)
{
    letter_t *first = &r->letters[r->run];
    r->run_end = r->run + 1;
    while (r->run_end < r->count && r->letters[r->run_end].target_len == first->target_len &&
           memcmp(r->letters[r->run_end].target, first->target, first->target_len) == 0)
        r->run_end++;
    size_t k = r->run_end - r->run;
    rd_store_letter_t *run = rd_calloc(k, sizeof *run);
    for (size_t i = 0; i < k; i++) {
        const letter_t *l = &r->letters[r->run + i];
        run[i] = (rd_store_letter_t){ .id = l->id, .target = { l->target, l->target_len },
                                      .max_retries = l->max_retries,
                                      .payload = { l->payload, l->payload_len },
                                      .priority = l->priority,
                                      .history = { l->history, l->history_len } };
    }
    rd_store_queue_t q = { .name = first->target, .len = first->target_len };
    if (rd_store_redrive_in(r->st, q, source_q(r), k, run, on_in, r) != 0)
        finish(r, RD_STORE_UNAVAILABLE, NULL);
    rd_free(run);
}

/* The take's letters into r's batch (copied: the batch outlives the reply). */
static void keep_take(redrive_t *r, const rd_store_redrive_taken_t *res)
{
    r->resumed = res->resumed;
    r->next = rd_strndup(res->next.ptr, res->next.len);
    r->letters = rd_calloc(res->count ? res->count : 1, sizeof *r->letters);
    for (size_t i = 0; i < res->count; i++) {
        const rd_store_letter_t *in = &res->letters[i];
        letter_t *l = &r->letters[i];
        l->id = in->id;
        l->max_retries = in->max_retries;
        l->target = rd_strndup(in->target.ptr, in->target.len);
        l->target_len = in->target.len;
        l->payload = rd_malloc(in->payload.len + 1);
        memcpy(l->payload, in->payload.ptr, in->payload.len);
        l->payload[in->payload.len] = '\0';
        l->payload_len = in->payload.len;
        l->priority = in->priority;
        l->history = rd_malloc(in->history.len + 1);
        if (in->history.len) memcpy(l->history, in->history.ptr, in->history.len);
        l->history[in->history.len] = '\0';
        l->history_len = in->history.len;
    }
    r->count = res->count;
}

static void on_take(const rd_store_redrive_taken_t *res, void *arg)
{
    redrive_t *r = arg;
    if (res->head.status == RD_STORE_BAD_CURSOR) {
        finish(r, RD_STORE_BAD_CURSOR, NULL);
        return;
    }
    if (failed(r, &res->head)) return;
    keep_take(r, res);
    if (r->count == 0) {
        /* Nothing taken: a resumed take dropped orphans, a selection moved on. */
        advance(r, r->resumed);
        return;
    }
    r->run = 0;
    send_run(r);
}

/* Step 1: the leftovers of a cut call, else the next selection. Returns
 * -1 when it could not be sent. */
static int take(redrive_t *r)
{
    rd_store_queue_t target = { .name = r->target, .len = r->target_len };
    if (strcmp(r->mode, "ids") == 0) {
        size_t k = r->end - r->offset < TAKE_IDS_MAX ? r->end - r->offset : TAKE_IDS_MAX;
        r->given = k;
        return rd_store_redrive_take(r->st, source_q(r), target, r->mode, r->ids + r->offset, k,
                                     0, NULL, NULL, on_take, r);
    }
    return rd_store_redrive_take(r->st, source_q(r), target, r->mode, NULL, 0, r->limit,
                                 r->cursor, r->needle, on_take, r);
}

void rd_redrive_resume(rd_redrive_t *r, bool go)
{
    if (!go) {
        r->halted = true;
        finish(r, RD_STORE_UNAVAILABLE, NULL);
    } else if (take(r) != 0) finish(r, RD_STORE_UNAVAILABLE, NULL);
}

/* ids by their shard, stably (ids of no shard: shard 0's, not found there). */
static void sort_by_shard(redrive_t *r)
{
    r->own_ids = rd_malloc(r->n * sizeof *r->own_ids);
    size_t at = 0;
    for (int k = 0; k < r->view.n; k++)
        for (size_t i = 0; i < r->n; i++) {
            int of = rd_shards_of_id(r->ids[i]);
            if ((of >= 0 && of < r->view.n ? of : 0) == k) r->own_ids[at++] = r->ids[i];
        }
    r->ids = r->own_ids;
}

/* The source's layout is read: the walk starts at shard 0, or at the
 * first shard with ids. */
static void on_view_read(const rd_store_head_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, res)) return;
    const rd_shard_view_t *v =
        rd_store_view(r->st, (rd_store_queue_t){ .name = r->source, .len = r->source_len });
    r->view = v ? *v : (rd_shard_view_t){ .n = 1 };
    r->end = r->n;
    if (strcmp(r->mode, "ids") == 0 && r->view.n > 1 && r->n > 0) {
        sort_by_shard(r);
        r->end = ids_end(r, 0);
        if (r->end == 0 && !next_shard(r)) {
            finish(r, RD_STORE_OK, NULL);
            return;
        }
    }
    if (take(r) != 0) finish(r, RD_STORE_UNAVAILABLE, NULL);
}

static int start(redrive_t *r)
{
    rd_store_queue_t source = { .name = r->source, .len = r->source_len };
    if (rd_store_read_view(r->st, source, on_view_read, r) == 0) return 0;
    rd_free(r->source);
    rd_free(r->target);
    rd_free(r);
    return -1;
}

int rd_redrive_paced(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                     const char *mode, int limit, rd_redrive_gate_cb gate,
                     rd_store_replayed_cb cb, void *arg)
{
    if (!rd_store_ready(st) || limit < 1 || limit > TAKE_LIMIT) return -1;
    redrive_t *r = rd_calloc(1, sizeof *r);
    r->st = st;
    r->source = rd_strndup(source.name, source.len);
    r->source_len = source.len;
    r->target = rd_strndup(target.name ? target.name : "", target.len);
    r->target_len = target.len;
    r->mode = mode;
    r->limit = limit;
    r->gate = gate;
    r->cb = cb;
    r->arg = arg;
    return start(r);
}

int rd_redrive_run(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                   const char *mode, const long long *ids, size_t n, const char *needle,
                   bool (*go_on)(void *arg), rd_store_replayed_cb cb, void *arg)
{
    if (!rd_store_ready(st)) return -1;
    redrive_t *r = rd_calloc(1, sizeof *r);
    r->limit = TAKE_LIMIT;
    r->st = st;
    r->source = rd_strndup(source.name, source.len);
    r->source_len = source.len;
    r->target = rd_strndup(target.name, target.len);
    r->target_len = target.len;
    r->mode = mode;
    r->needle = needle;
    r->ids = ids;
    r->n = n;
    r->go_on = go_on;
    r->cb = cb;
    r->arg = arg;
    return start(r);
}
