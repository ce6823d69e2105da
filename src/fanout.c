/* fanout.c - every queue at once: a page of the registry and each of its
 * queues' stats, bounded in flight (GET /queues), and the /metrics snapshot
 * that concurrent scrapes share. */
#include "retryd/fanout.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/shard_stats.h"

struct rd_fanout {
    uv_loop_t *loop;
    rd_store_t *st;
    rd_registry_t *registry;
    /* Fan-outs with stats still to send, served in turn; at most
     * RD_FANOUT_IN_FLIGHT stats in flight for all of them together. */
    struct fanout *head, *tail;
    size_t in_flight;
    bool pumping;
    struct snapshot *snapshot;  /* the /metrics snapshot, NULL until first asked */
};

typedef struct fanout {
    rd_fanout_t *fo;
    rd_fanout_cb cb;
    void *arg;
    rd_queue_metrics_t *queues;
    size_t count, sent, outstanding;
    bool any_failed;
    long long total;
    char *next_cursor;          /* the page's, NULL at the end */
    size_t next_cursor_len;
    struct fanout *next;        /* in fo's turn list while stats are still to send */
} fanout_t;

typedef struct fanout_slot {
    fanout_t *f;
    size_t index;
} fanout_slot_t;

static void fanout_free(fanout_t *f)
{
    for (size_t i = 0; i < f->count; i++) rd_free(f->queues[i].name);
    rd_free(f->queues);
    rd_free(f->next_cursor);
    rd_free(f);
}

static void fanout_finish(fanout_t *f)
{
    rd_fanout_queues_t res = {
        .head.status = f->any_failed && f->count > 0 && !rd_store_ready(f->fo->st)
                           ? RD_STORE_UNAVAILABLE : RD_STORE_OK,
        .queues = f->queues,
        .count = f->count,
        .total = f->total,
        .next_cursor = { f->next_cursor, f->next_cursor_len },
    };
    f->cb(&res, f->arg);
    fanout_free(f);
}

static void on_fanout_stats(const rd_store_stats_result_t *res, void *arg);

/* Sends the next stats call of f (one queue); a call that cannot be sent
 * counts as a failed queue. */
static void fanout_send_one(fanout_t *f)
{
    rd_queue_metrics_t *m = &f->queues[f->sent];
    fanout_slot_t *slot = rd_malloc(sizeof *slot);
    slot->f = f;
    slot->index = f->sent++;
    rd_store_queue_t q = { .name = m->name, .len = m->name_len };
    if (rd_shard_stats(f->fo->st, q, 0, on_fanout_stats, slot) == 0) {
        f->outstanding++;
        f->fo->in_flight++;
    } else {
        f->any_failed = true;
        rd_free(slot);
    }
}

/* Keeps at most RD_FANOUT_IN_FLIGHT stats calls in flight across every
 * fan-out, one call per fan-out in turn, so eight clients listing 1000 queues
 * each put no more calls before another client's command in Redis than one
 * does; a fan-out finishes when its last call returns. */
static void fanout_pump(rd_fanout_t *fo)
{
    if (fo->pumping) return;  /* a callback below started a fan-out: served here */
    fo->pumping = true;
    while (fo->head && fo->in_flight < RD_FANOUT_IN_FLIGHT) {
        fanout_t *f = fo->head;
        fo->head = f->next;
        if (fo->head == NULL) fo->tail = NULL;
        f->next = NULL;
        fanout_send_one(f);
        if (f->sent < f->count) {  /* its next call waits for the others' turns */
            if (fo->tail) fo->tail->next = f;
            else fo->head = f;
            fo->tail = f;
        } else if (f->outstanding == 0) {
            fanout_finish(f);
        }
    }
    fo->pumping = false;
}

/* Puts a fan-out whose page came in line for its stats calls. */
static void fanout_start(fanout_t *f)
{
    rd_fanout_t *fo = f->fo;
    if (f->count == 0) {
        fanout_finish(f);
        return;
    }
    if (fo->tail) fo->tail->next = f;
    else fo->head = f;
    fo->tail = f;
    fanout_pump(fo);
}

/* A stats answer with no key behind it: a queue whose keys are all gone. */
static bool stats_show_no_key(const rd_queue_stats_t *st)
{
    return st->totals_len == 0 && st->top_errors_len == 0 && st->ready == 0 &&
           st->scheduled == 0 && st->processing == 0 && st->succeeded == 0 && st->dead == 0;
}

static void on_fanout_stats(const rd_store_stats_result_t *res, void *arg)
{
    fanout_slot_t *slot = arg;
    fanout_t *f = slot->f;
    rd_queue_metrics_t *m = &f->queues[slot->index];
    if (res->head.status == RD_STORE_OK) {
        rd_metrics_from_stats(m, &res->stats);
        if (stats_show_no_key(&res->stats)) {
            rd_store_queue_t q = { .name = m->name, .len = m->name_len };
            rd_registry_schedule(f->fo->registry, q, 0);
        }
    } else {
        f->any_failed = true;
    }
    rd_free(slot);
    f->outstanding--;
    rd_fanout_t *fo = f->fo;
    fo->in_flight--;
    if (f->outstanding == 0 && f->sent == f->count) fanout_finish(f);
    fanout_pump(fo);
}

static void on_fanout_page(const rd_store_page_t *res, void *arg)
{
    fanout_t *f = arg;
    if (res->head.status != RD_STORE_OK) {
        rd_fanout_queues_t failed = { .head = res->head };
        f->cb(&failed, f->arg);
        fanout_free(f);
        return;
    }
    f->total = res->total;
    if (res->next_cursor.len > 0) {
        f->next_cursor = rd_strndup(res->next_cursor.ptr, res->next_cursor.len);
        f->next_cursor_len = res->next_cursor.len;
    }
    f->count = res->count;
    f->queues = rd_calloc(res->count ? res->count : 1, sizeof *f->queues);
    for (size_t i = 0; i < res->count; i++) {
        f->queues[i].name = rd_strndup(res->names[i].ptr, res->names[i].len);
        f->queues[i].name_len = res->names[i].len;
    }
    fanout_start(f);
}

int rd_fanout_queues_stats(rd_fanout_t *fo, const char *cursor, size_t cursor_len, int limit,
                           rd_fanout_cb cb, void *arg)
{
    fanout_t *f = rd_calloc(1, sizeof *f);
    f->fo = fo;
    f->cb = cb;
    f->arg = arg;
    int rc = rd_store_queues_page(fo->st, cursor, cursor_len, limit, on_fanout_page, f);
    if (rc != 0) rd_free(f);
    return rc;
}

/* ---------------------------------------------------------------- the /metrics snapshot */

typedef struct snap_waiter {
    rd_fanout_cb cb;
    void *arg;
    struct snap_waiter *next;
} snap_waiter_t;

/* The first RD_METRICS_MAX_QUEUES queues' numbers, as one fan-out read them,
 * shared by every scrape while younger than the scrape's max age. */
typedef struct snapshot {
    rd_fanout_t *fo;
    bool valid;                 /* a fan-out has filled it */
    uint64_t taken_ms;          /* uv_now when that fan-out finished */
    rd_queue_metrics_t *queues; /* owned, count of them */
    size_t count;
    long long total;
    bool refreshing;            /* a fan-out is under way: scrapes wait for it */
    snap_waiter_t *waiters, *waiters_tail;
    uv_timer_t *deliver;        /* answers waiters of a fresh snapshot from the loop */
} snapshot_t;

static void free_queue_metrics(rd_queue_metrics_t *qs, size_t n)
{
    for (size_t i = 0; i < n; i++) rd_free(qs[i].name);
    rd_free(qs);
}

/* Answers every waiter now: with the snapshot, or with head when not OK. */
static void snapshot_answer(snapshot_t *sn, const rd_store_head_t *head)
{
    snap_waiter_t *w = sn->waiters;
    sn->waiters = sn->waiters_tail = NULL;
    rd_fanout_queues_t res = { .head = *head };
    if (head->status == RD_STORE_OK) {
        res.queues = sn->queues;
        res.count = sn->count;
        res.total = sn->total;
        res.age_ms = (long long)(uv_now(sn->fo->loop) - sn->taken_ms);
    }
    /* A callback may ask again (a pipelined scrape): it joins a new list. */
    while (w) {
        snap_waiter_t *next = w->next;
        w->cb(&res, w->arg);
        rd_free(w);
        w = next;
    }
}

static void on_snapshot_deliver(uv_timer_t *t)
{
    snapshot_t *sn = t->data;
    if (sn->refreshing) return;  /* the refresh answers them */
    rd_store_head_t ok = { .status = RD_STORE_OK };
    snapshot_answer(sn, &ok);
}

static void on_snapshot_fanout(const rd_fanout_queues_t *res, void *arg)
{
    snapshot_t *sn = arg;
    sn->refreshing = false;
    if (res->head.status == RD_STORE_OK) {
        free_queue_metrics(sn->queues, sn->count);
        sn->count = res->count;
        sn->queues = rd_calloc(res->count ? res->count : 1, sizeof *sn->queues);
        for (size_t i = 0; i < res->count; i++) {
            sn->queues[i] = res->queues[i];
            sn->queues[i].name = rd_strndup(res->queues[i].name, res->queues[i].name_len);
        }
        sn->total = res->total;
        sn->taken_ms = uv_now(sn->fo->loop);
        sn->valid = true;
    }
    snapshot_answer(sn, &res->head);
}

static void on_deliver_closed(uv_handle_t *h)
{
    rd_free(h);
}

static void snapshot_free(rd_fanout_t *fo)
{
    snapshot_t *sn = fo->snapshot;
    if (sn == NULL) return;
    /* Nothing should be waiting by now (the link closed first and answered
     * the refresh); answer any that are, exactly once. */
    rd_store_head_t away = { .status = RD_STORE_UNAVAILABLE };
    snapshot_answer(sn, &away);
    uv_close((uv_handle_t *)sn->deliver, on_deliver_closed);
    free_queue_metrics(sn->queues, sn->count);
    rd_free(sn);
    fo->snapshot = NULL;
}

int rd_fanout_snapshot(rd_fanout_t *fo, long long max_age_ms, rd_fanout_cb cb, void *arg)
{
    snapshot_t *sn = fo->snapshot;
    if (sn == NULL) {
        sn = fo->snapshot = rd_calloc(1, sizeof *sn);
        sn->fo = fo;
        sn->deliver = rd_malloc(sizeof *sn->deliver);
        uv_timer_init(fo->loop, sn->deliver);
        sn->deliver->data = sn;
    }
    uint64_t now = uv_now(fo->loop);
    bool fresh = sn->valid && now - sn->taken_ms <= (uint64_t)(max_age_ms > 0 ? max_age_ms : 0);
    if (!fresh && !sn->refreshing) {
        if (rd_fanout_queues_stats(fo, NULL, 0, RD_METRICS_MAX_QUEUES, on_snapshot_fanout, sn) != 0)
            return -1;
        sn->refreshing = true;
    }
    snap_waiter_t *w = rd_calloc(1, sizeof *w);
    w->cb = cb;
    w->arg = arg;
    if (sn->waiters_tail) sn->waiters_tail->next = w;
    else sn->waiters = w;
    sn->waiters_tail = w;
    if (!sn->refreshing) uv_timer_start(sn->deliver, on_snapshot_deliver, 0, 0);
    return 0;
}

rd_fanout_t *rd_fanout_new(uv_loop_t *loop, rd_store_t *st, rd_registry_t *registry)
{
    rd_fanout_t *fo = rd_calloc(1, sizeof *fo);
    fo->loop = loop;
    fo->st = st;
    fo->registry = registry;
    return fo;
}

void rd_fanout_free(rd_fanout_t *fo)
{
    if (fo == NULL) return;
    snapshot_free(fo);
    rd_free(fo);
}
