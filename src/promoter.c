/* promoter.c - the self-re-arming timer behind promotion, lease reclaim and
 * retention. */
#include "retryd/promoter.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

struct rd_promoter {
    uv_timer_t timer;
    rd_store_t *store;
    rd_promoter_options_t opts;

    /* The round in progress: the queue names it copied and where it is. */
    char **names;
    size_t *name_lens;
    size_t count, next;
    long long wake_in_ms;         /* earliest due time reported this round, -1 none */
    bool full_batch;              /* some queue has more work waiting */

    bool busy;                    /* a store call is in flight */
    bool stopping;
    void (*on_stopped)(void *arg);
    void *on_stopped_arg;
    unsigned long rounds;
};

static void start_round(rd_promoter_t *p);

static void free_names(rd_promoter_t *p)
{
    for (size_t i = 0; i < p->count; i++) rd_free(p->names[i]);
    rd_free(p->names);
    rd_free(p->name_lens);
    p->names = NULL;
    p->name_lens = NULL;
    p->count = p->next = 0;
}

static void on_closed(uv_handle_t *h)
{
    rd_promoter_t *p = h->data;
    void (*cb)(void *) = p->on_stopped;
    void *arg = p->on_stopped_arg;
    free_names(p);
    rd_free(p);
    if (cb) cb(arg);
}

static void on_timer(uv_timer_t *t)
{
    start_round(t->data);
}

static void arm(rd_promoter_t *p, uint64_t delay_ms)
{
    if (p->stopping) {
        uv_close((uv_handle_t *)&p->timer, on_closed);
        return;
    }
    uv_timer_start(&p->timer, on_timer, delay_ms, 0);
}

static void finish_round(rd_promoter_t *p)
{
    p->rounds++;
    free_names(p);
    uint64_t delay = (uint64_t)p->opts.tick_ms;
    if (p->full_batch) delay = 0;
    else if (p->wake_in_ms >= 0 && (uint64_t)p->wake_in_ms < delay)
        delay = (uint64_t)p->wake_in_ms + 1;  /* +1: Redis's ms may round down */
    arm(p, delay);
}

static void next_queue(rd_promoter_t *p);

static void on_ticked(const rd_store_result_t *res, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    if (res->status == RD_STORE_OK) {
        if (res->promoted || res->reclaimed || res->expired)
            rd_debug("promoter: %.*s promoted %lld, reclaimed %lld, expired %lld",
                     (int)p->name_lens[p->next], p->names[p->next], res->promoted,
                     res->reclaimed, res->expired);
        long long b = p->opts.batch;
        if (res->promoted >= b || res->reclaimed >= b || res->expired >= b) p->full_batch = true;
        if (res->next_in_ms >= 0 && (p->wake_in_ms < 0 || res->next_in_ms < p->wake_in_ms))
            p->wake_in_ms = res->next_in_ms;
        if (res->ready > 0 && p->opts.on_claimable) {
            rd_store_queue_t q = { p->names[p->next], p->name_lens[p->next] };
            p->opts.on_claimable(q, p->opts.on_claimable_arg);
        }
    } else {
        rd_warn("promoter: tick of queue %.*s failed (%.*s)", (int)p->name_lens[p->next],
                p->names[p->next], (int)res->detail.len, res->detail.ptr ? res->detail.ptr : "");
    }
    p->next++;
    next_queue(p);
}

static void next_queue(rd_promoter_t *p)
{
    if (p->stopping || p->next >= p->count) {
        finish_round(p);
        return;
    }
    rd_store_queue_t q = { p->names[p->next], p->name_lens[p->next] };
    if (rd_store_tick(p->store, q, p->opts.batch, p->opts.dead_ttl_ms, p->opts.succeeded_ttl_ms,
                      on_ticked, p) != 0) {
        finish_round(p);  /* Redis went away: try again next tick */
        return;
    }
    p->busy = true;
}

static void on_queues(const rd_store_result_t *res, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    if (res->status != RD_STORE_OK) {
        finish_round(p);
        return;
    }
    p->count = res->count;
    p->names = rd_calloc(res->count ? res->count : 1, sizeof *p->names);
    p->name_lens = rd_calloc(res->count ? res->count : 1, sizeof *p->name_lens);
    for (size_t i = 0; i < res->count; i++) {
        p->names[i] = rd_strndup(res->names[i].ptr, res->names[i].len);
        p->name_lens[i] = res->names[i].len;
    }
    next_queue(p);
}

static void start_round(rd_promoter_t *p)
{
    p->full_batch = false;
    p->wake_in_ms = -1;
    if (p->stopping) {
        arm(p, 0);
        return;
    }
    if (rd_store_queues(p->store, on_queues, p) != 0) {
        arm(p, (uint64_t)p->opts.tick_ms);  /* not connected yet */
        return;
    }
    p->busy = true;
}

rd_promoter_t *rd_promoter_start(uv_loop_t *loop, rd_store_t *store,
                                 const rd_promoter_options_t *opts)
{
    rd_promoter_t *p = rd_calloc(1, sizeof *p);
    p->store = store;
    p->opts = *opts;
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, on_timer, 0, 0);
    return p;
}

void rd_promoter_stop(rd_promoter_t *p, void (*on_stopped)(void *arg), void *arg)
{
    p->stopping = true;
    p->on_stopped = on_stopped;
    p->on_stopped_arg = arg;
    if (!p->busy) {
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->timer, on_closed);
    }
    /* Otherwise the callback in flight ends the round, and arm() closes. */
}

unsigned long rd_promoter_rounds(const rd_promoter_t *p)
{
    return p->rounds;
}
