/* shard_round.c - a sharded queue's round after its ticks (include/retryd/
 * shard_round.h, docs/sharding.md "When the raise settles"): while a raise
 * settles, each shard below the raise's `from` walks its groups
 * (shard_scan, bounded steps); once every one has walked them and none
 * holds a stray group, shard 0 closes the raise (shards_set close with the
 * rev the walk saw) and the layout is copied to every shard. Every step is
 * one function call that checks its own preconditions, so two daemons
 * running rounds at once do the same work twice, never a wrong one: a
 * close with an older rev answers "stale". */
#include "retryd/shard_round.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/shard_admin.h"
#include "retryd/shard_view.h"

enum {
    SCAN_STEPS_MAX = 20,        /* scan calls a round spends on one shard */
    AGAIN_IN_MS = 1000,         /* a round not done is due again within this */
};

typedef struct round {
    rd_store_t *st;
    char *queue;
    size_t len;
    rd_shard_view_t view;       /* as the round began */
    char rev[24];
    int shard;                  /* the shard walking now: 0 up to view.from - 1 */
    int steps;                  /* scan calls on it this round */
    long long strays;           /* strays on the shards walked */
    rd_shard_round_cb cb;
    void *arg;
} round_t;

static rd_store_queue_t queue_of(const round_t *r)
{
    return (rd_store_queue_t){ .name = r->queue, .len = r->len };
}

static void on_registered(const rd_store_count_t *res, void *arg)
{
    (void)res, (void)arg;   /* lost: the tick's own promise (a second) still holds */
}

static void end(round_t *r, rd_shard_round_status_t status)
{
    /* Not done: the queue is due again soon whatever its ticks promise (a
     * raise's first round comes from the raise, not from the schedule). */
    if (status == RD_SHARD_ROUND_SETTLING || status == RD_SHARD_ROUND_FAILED)
        (void)rd_store_register(r->st, queue_of(r), AGAIN_IN_MS, on_registered, NULL);
    if (r->cb) r->cb(status, r->strays, r->arg);
    rd_free(r->queue);
    rd_free(r);
}

static bool is(const rd_str_t *s, const char *lit)
{
    return s->ptr && s->len == strlen(lit) && memcmp(s->ptr, lit, s->len) == 0;
}

static void on_copied(const rd_shard_admin_result_t *res, void *arg)
{
    round_t *r = arg;
    if (res->status != RD_SHARD_ADMIN_OK)
        rd_warn("shards: %.*s: the closed raise was not copied to every shard; the next policy "
                "write copies it", (int)r->len, r->queue);
    end(r, RD_SHARD_ROUND_CLOSED);
}

/* The closed layout is this daemon's view before any shard's copy has it:
 * its own placements never meet a copy newer than its view. */
static void on_closed_view(const rd_store_head_t *res, void *arg)
{
    round_t *r = arg;
    (void)res;   /* unread: the copies go on; the view is read again when refused */
    if (rd_shard_admin_copy(r->st, queue_of(r), on_copied, r) != 0) end(r, RD_SHARD_ROUND_CLOSED);
}

static void on_closed(const rd_store_strings_t *res, void *arg)
{
    round_t *r = arg;
    if (res->head.status != RD_STORE_OK || res->count == 0 || !is(&res->strings[0], "ok")) {
        rd_store_relearn_view(r->st, queue_of(r));   /* another round closed it, or a change */
        end(r, RD_SHARD_ROUND_STALE);
        return;
    }
    rd_info("shards: %.*s: the raise to %d shards settled", (int)r->len, r->queue, r->view.n);
    if (rd_store_read_view(r->st, queue_of(r), on_closed_view, r) != 0)
        end(r, RD_SHARD_ROUND_CLOSED);
}

static int scan(round_t *r);

static void on_repaired(const rd_shard_admin_result_t *res, void *arg)
{
    round_t *r = arg;
    end(r, res->status == RD_SHARD_ADMIN_OK ? RD_SHARD_ROUND_SETTLING : RD_SHARD_ROUND_FAILED);
}

static void on_scanned(const rd_store_strings_t *res, void *arg)
{
    round_t *r = arg;
    if (res->head.status != RD_STORE_OK || res->count < 2) {
        end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    const rd_str_t *code = &res->strings[0];
    if (is(code, "stale") && r->shard > 0 && rd_str_number(&res->strings[1]) < r->view.rev) {
        /* A copy that never came (its daemon died between the raise and the
         * copies): copied now, walked next round. */
        if (rd_shard_admin_copy(r->st, queue_of(r), on_repaired, r) != 0)
            end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    if (is(code, "stale")) {
        rd_store_relearn_view(r->st, queue_of(r));
        end(r, RD_SHARD_ROUND_STALE);
        return;
    }
    bool done = is(code, "done");
    if (!done && !is(code, "more")) {
        end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    if (!done) {
        if (++r->steps >= SCAN_STEPS_MAX) {   /* the rest next round */
            end(r, RD_SHARD_ROUND_SETTLING);
            return;
        }
        if (scan(r) != 0) end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    r->strays += rd_str_number(&res->strings[1]);
    if (++r->shard < r->view.from) {
        r->steps = 0;
        if (scan(r) != 0) end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    if (r->strays > 0) {   /* groups with messages on their old shards: not yet */
        end(r, RD_SHARD_ROUND_SETTLING);
        return;
    }
    if (rd_store_shards_set(r->st, rd_shard_view_at(&r->view, queue_of(r), 0), "close",
                            r->view.rev, NULL, on_closed, r) != 0)
        end(r, RD_SHARD_ROUND_FAILED);
}

static int scan(round_t *r)
{
    return rd_store_shard_scan(r->st, rd_shard_view_at(&r->view, queue_of(r), r->shard), r->rev,
                               on_scanned, r);
}

/* The layout as shard 0 has it now: a round never closes by an old view. */
static void on_view_read(const rd_store_head_t *res, void *arg)
{
    round_t *r = arg;
    if (res->status != RD_STORE_OK) {
        end(r, RD_SHARD_ROUND_FAILED);
        return;
    }
    const rd_shard_view_t *v = rd_store_view(r->st, queue_of(r));
    if (v == NULL || v->from <= 0) {
        end(r, RD_SHARD_ROUND_IDLE);
        return;
    }
    r->view = *v;
    snprintf(r->rev, sizeof r->rev, "%lld", v->rev);
    if (scan(r) != 0) end(r, RD_SHARD_ROUND_FAILED);
}

int rd_shard_round(rd_store_t *st, rd_store_queue_t q, rd_shard_round_cb cb, void *arg)
{
    round_t *r = rd_calloc(1, sizeof *r);
    *r = (round_t){ .st = st, .queue = rd_strndup(q.name, q.len), .len = q.len, .cb = cb,
                    .arg = arg };
    if (rd_store_read_view(st, queue_of(r), on_view_read, r) != 0) {
        rd_free(r->queue);
        rd_free(r);
        return -1;
    }
    return 0;
}
