/* promoter.c - the self-re-arming timer behind promotion, lease reclaim and
 * retention: it visits the queues the timer schedule names, not every queue
 * (docs/design.md "Timers and the registry"). */
#include "retryd/promoter.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/shard_round.h"
#include "retryd/shard_view.h"

enum {
    TAKE_LIMIT = RD_STORE_REPORTS_MAX,  /* queues per round */
    TAKE_LEASE_MS = 5000,               /* a taken queue comes due again then if no report came */
};

struct rd_promoter {
    uv_timer_t timer;
    rd_store_t *store;
    rd_promoter_options_t opts;

    /* The round in progress: the queues it took and what their ticks found. */
    long long token;
    char **names;
    size_t *name_lens;
    size_t count, next;
    rd_timer_report_t reports[TAKE_LIMIT];
    size_t nreports;
    long long wake_in_ms;         /* earliest due time reported this round, -1 none */
    bool full_batch;              /* more work is waiting: another round at once */
    bool take_failing;            /* logged once per run of failures */
    bool fleet_alert_url;         /* this round's ticks look for --alert-url's alerts */

    int shard, nshards;           /* a sharded queue's shard being ticked, of how many */
    rd_store_tick_t acc;          /* its ticks so far, summed */
    bool busy;                    /* a store call is in flight */
    bool stopping;
    void (*on_stopped)(void *arg);
    void *on_stopped_arg;
};

static void start_round(rd_promoter_t *p);

static void free_names(rd_promoter_t *p)
{
    for (size_t i = 0; i < p->count; i++) rd_free(p->names[i]);
    rd_free(p->names);
    rd_free(p->name_lens);
    p->names = NULL;
    p->name_lens = NULL;
    p->count = p->next = p->nreports = 0;
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

static void earliest(rd_promoter_t *p, long long in_ms)
{
    if (in_ms >= 0 && (p->wake_in_ms < 0 || in_ms < p->wake_in_ms)) p->wake_in_ms = in_ms;
}

static void finish_round(rd_promoter_t *p)
{
    free_names(p);
    uint64_t delay = (uint64_t)p->opts.tick_ms;
    if (p->full_batch) delay = 0;
    else if (p->wake_in_ms >= 0 && (uint64_t)p->wake_in_ms < delay)
        delay = (uint64_t)p->wake_in_ms + 1;  /* +1: Redis's ms may round down */
    arm(p, delay);
}

static void on_reported(const rd_store_done_t *res, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    if (res->head.status != RD_STORE_OK)
        rd_warn("promoter: reporting %zu ticks failed (%.*s); those queues come due again in "
                "%d ms", p->nreports, (int)res->head.detail.len, res->head.detail.ptr ? res->head.detail.ptr : "",
                TAKE_LEASE_MS);
    else if (res->left > 0)
        rd_debug("promoter: %lld queues without keys left the registry", res->left);
    finish_round(p);
}

/* One timer_done with every tick's answer; a queue whose tick failed is not
 * reported, so it comes due again when its lease ends. */
static void report(rd_promoter_t *p)
{
    if (p->nreports == 0 ||
        rd_store_timer_done(p->store, p->token, p->reports, p->nreports, on_reported, p) != 0) {
        finish_round(p);
        return;
    }
    p->busy = true;
}

static void next_queue(rd_promoter_t *p);
static int tick_shard(rd_promoter_t *p);

/* A sharded queue's ticks, one per shard in turn, summed into the one
 * report of the queue: the earliest next_in_ms, the counts added up. */
static void add_tick(rd_store_tick_t *acc, const rd_store_tick_t *t)
{
    acc->promoted += t->promoted;
    acc->reclaimed += t->reclaimed;
    acc->expired += t->expired;
    acc->ready += t->ready;
    acc->moving += t->moving;
    if (t->next_in_ms >= 0 && (acc->next_in_ms < 0 || t->next_in_ms < acc->next_in_ms))
        acc->next_in_ms = t->next_in_ms;
    if (t->alerts > acc->alerts) acc->alerts = t->alerts;
    acc->alerts_checked = acc->alerts_checked || t->alerts_checked;
}

/* A queue left unreported (its lease runs out and it comes due again): the
 * next queue. */
static void skip_queue(rd_promoter_t *p)
{
    p->next++;
    next_queue(p);
}

/* The layout a tick of shard 0 asked for: learned, then the other shards. */
static void on_layout_read(const rd_store_strings_t *res, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    rd_store_queue_t q = { .name = p->names[p->next], .len = p->name_lens[p->next] };
    if (res->head.status == RD_STORE_OK)
        rd_shard_views_learn(rd_store_views(p->store), q, res->strings, res->count,
                             rd_store_now_ms(p->store));
    rd_shard_view_t *v = rd_store_view(p->store, q);
    if (p->stopping || v == NULL || v->n <= 1) {
        skip_queue(p);
        return;
    }
    p->nshards = v->n;
    p->shard = 1;
    if (tick_shard(p) != 0) skip_queue(p);
}

static void on_ticked(const rd_store_tick_t *one, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    rd_store_queue_t q = { .name = p->names[p->next], .len = p->name_lens[p->next] };
    rd_store_tick_t sum = *one;   /* a failed tick: the queue is not reported */
    if (one->head.status == RD_STORE_OK) {
        if (p->shard == 0) p->acc = *one;
        else add_tick(&p->acc, one);
        if (p->shard == 0 && one->shards > 1 && one->shards != p->nshards) {
            /* Shard 0 says another count than the view (none, or an old
             * one): read the layout now and tick the other shards in this
             * round; shard 0 alone must not speak for the queue. */
            if (rd_store_policy_pairs(p->store, q, on_layout_read, p) == 0) {
                p->busy = true;
                return;
            }
            skip_queue(p);
            return;
        }
        if (p->shard + 1 < p->nshards) {
            p->shard++;
            if (tick_shard(p) == 0) return;
            skip_queue(p);   /* not all its shards ticked: not reported, due again later */
            return;
        }
        sum = p->acc;
        /* Only shard 0's empty counts (a sharded queue has a policy: never). */
        if (p->nshards > 1) sum.empty = false;
        /* A raise settling: its round after the ticks (src/shard_round.c). */
        rd_shard_view_t *v = p->nshards > 1 ? rd_store_view(p->store, q) : NULL;
        if (v && v->from > 0 && rd_shard_round(p->store, q, NULL, NULL) != 0)
            rd_debug("promoter: %.*s: its shards' round could not be sent", (int)q.len, q.name);
    }
    const rd_store_tick_t *res = &sum;
    if (res->head.status == RD_STORE_OK) {
        if (res->promoted || res->reclaimed || res->expired)
            rd_debug("promoter: %.*s promoted %lld, reclaimed %lld, expired %lld", (int)q.len,
                     q.name, res->promoted, res->reclaimed, res->expired);
        long long b = p->opts.batch, next_in_ms = res->next_in_ms;
        if (res->promoted >= b || res->reclaimed >= b || res->expired >= b) {
            p->full_batch = true;
            next_in_ms = 0;  /* more waiting: due again at once */
        }
        earliest(p, next_in_ms);
        /* Alerts to the queue's own alert_url are sent by whoever ticks it;
         * alerts for --alert-url by this instance if it has the flag, else
         * handed to one that has (timer_done, then its timer_take). */
        rd_timer_alerts_t said = RD_TIMER_ALERTS_UNSAID;
        bool deliver = res->alerts == 2 || (res->alerts == 1 && p->opts.alert_url);
        if (res->alerts == 1 && !p->opts.alert_url) said = RD_TIMER_ALERTS_HANDOFF;
        else if (res->alerts == 0 && res->alerts_checked && p->fleet_alert_url)
            said = RD_TIMER_ALERTS_NONE;
        p->reports[p->nreports++] = (rd_timer_report_t){ q, next_in_ms, res->empty, said };
        if (res->ready > 0 && p->opts.on_claimable) p->opts.on_claimable(q, p->opts.on_claimable_arg);
        if (deliver && p->opts.on_alerts) p->opts.on_alerts(q, p->opts.on_alerts_arg);
        if (res->moving > 0 && p->opts.on_moving) p->opts.on_moving(q, p->opts.on_moving_arg);
    } else {
        rd_warn("promoter: tick of queue %.*s failed (%.*s)", (int)q.len, q.name,
                (int)res->head.detail.len, res->head.detail.ptr ? res->head.detail.ptr : "");
    }
    p->next++;
    next_queue(p);
}

static void next_queue(rd_promoter_t *p)
{
    if (p->stopping || p->next >= p->count) {
        report(p);
        return;
    }
    rd_store_queue_t q = { .name = p->names[p->next], .len = p->name_lens[p->next] };
    rd_shard_view_t *v = rd_store_view(p->store, q);
    p->nshards = v ? v->n : 1;
    p->shard = 0;
    if (tick_shard(p) != 0) report(p);  /* Redis went away: the rest come due again later */
}

/* Ticks shard p->shard of the current queue. */
static int tick_shard(rd_promoter_t *p)
{
    rd_store_queue_t q = { .name = p->names[p->next], .len = p->name_lens[p->next] };
    if (p->shard > 0) {
        rd_shard_view_t *v = rd_store_view(p->store, q);
        if (v == NULL || p->shard >= v->n) return -1;
        q = rd_shard_view_at(v, q, p->shard);
    }
    if (rd_store_tick(p->store, q, p->opts.batch, p->opts.dead_ttl_ms, p->opts.succeeded_ttl_ms,
                      on_ticked, p) != 0)
        return -1;
    p->busy = true;
    return 0;
}

static void on_taken(const rd_store_taken_t *res, void *arg)
{
    rd_promoter_t *p = arg;
    p->busy = false;
    if (res->head.status != RD_STORE_OK) {
        if (!p->take_failing)
            rd_warn("promoter: reading the timer schedule failed (%.*s); trying each tick",
                    (int)res->head.detail.len, res->head.detail.ptr ? res->head.detail.ptr : "");
        p->take_failing = true;
        finish_round(p);
        return;
    }
    if (p->take_failing) rd_info("promoter: the timer schedule answers again");
    p->take_failing = false;
    p->token = res->token;
    p->fleet_alert_url = res->fleet_alert_url || p->opts.alert_url;
    rd_store_set_fleet_alert_url(p->store, res->fleet_alert_url);
    for (size_t i = 0; i < res->alert_count && p->opts.on_alerts; i++) {
        rd_store_queue_t q = { .name = res->alert_names[i].ptr, .len = res->alert_names[i].len };
        p->opts.on_alerts(q, p->opts.on_alerts_arg);
    }
    earliest(p, res->next_in_ms);
    p->full_batch = res->count >= TAKE_LIMIT;
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
    if (p->opts.on_round) p->opts.on_round(p->opts.on_round_arg);
    if (rd_store_timer_take(p->store, TAKE_LIMIT, TAKE_LEASE_MS, RD_SWEEP_BATCH,
                            RD_SWEEP_EVERY_MS, RD_SWEEP_CYCLE_MS, on_taken, p) != 0) {
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
    /* Otherwise the callback in flight ends the round (reporting what it
     * ticked), and arm() closes. */
}
