/* coalesce.c - settle-and-claim requests of one queue sent together
 * (docs/coalescing.md, include/retryd/coalesce.h).
 *
 * A queue with a settle_claim call in flight has a line: the requests that
 * came for it since wait there, in arrival order, with copies of what they
 * send. When the line's calls have returned, each answer split among the
 * requests it carried, every request waiting goes out at once: each run of
 * them that shares a lease and a worker (and fits one call: 100
 * settlements, 100 messages) in one call, in their order. A line with
 * nothing in flight and nothing waiting is removed.
 *
 * A sharded queue (docs/sharding.md "Claim: which shards") has a line per
 * shard. A request is split: its settlements go to their ids' shards
 * (count 0 there), then its claim to the shard of its first settlement
 * (a worker stays on a shard while it has work) or, with none, the next
 * of the view's rotation; a claim that finds nothing goes on to the next
 * shard, at most three in all. Its answer is put together when the last
 * part returns: the outcomes in the order given, the messages of the claim
 * that found some. A daemon without a view learns one when an empty claim
 * says the queue is sharded. */
#include "retryd/coalesce.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/queue_lines.h"
#include "retryd/shard_view.h"
#include "retryd/shards.h"

typedef struct request {
    struct request *next;
    rd_lease_t lease;
    char *worker;                   /* owned; NULL: none */
    int count;
    size_t n;
    rd_settlement_t *items;         /* its settlements until sent */
    bool owns_items;                /* items and their strings are copies it frees */
    /* Its settlements' outcomes (owned copies), once a call applied them but
     * was cut short before its turn to claim: it waits again, to claim only. */
    rd_str_t *outcomes;
    size_t settled;
    rd_store_settled_cb cb;
    void *arg;
} request_t;

typedef struct line {
    rd_line_key_t key;              /* its queue, in co->lines (first) */
    rd_coalescer_t *co;
    request_t *waiting, *last;      /* in arrival order */
    size_t out;                     /* its calls in flight */
} line_t;

/* One settle_claim call in flight and the requests it carries, in order. */
typedef struct batch {
    line_t *line;
    request_t *sent;
} batch_t;

struct rd_coalescer {
    rd_store_t *store;
    rd_line_table_t lines;
    struct {
        unsigned long long requests;    /* accepted, since start */
        unsigned long long calls;       /* settle_claim calls they took */
    } counts;
};

rd_coalescer_t *rd_coalescer_new(rd_store_t *store)
{
    rd_coalescer_t *co = rd_calloc(1, sizeof *co);
    co->store = store;
    return co;
}

/* ------------------------------------------------------------- requests */

static char *copy_or_null(const char *s)
{
    return s ? rd_strdup(s) : NULL;
}

static request_t *request_new(rd_lease_t lease, int count, const char *worker, size_t n,
                              const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    request_t *r = rd_calloc(1, sizeof *r);
    r->lease = lease;
    r->worker = copy_or_null(worker);
    r->count = count;
    r->n = n;
    r->items = (rd_settlement_t *)items;   /* borrowed until keep_items copies them */
    r->cb = cb;
    r->arg = arg;
    return r;
}

/* A request that has to wait keeps copies: the caller's items live only
 * during its call. */
static void keep_items(request_t *r)
{
    const rd_settlement_t *from = r->items;
    r->items = r->n ? rd_malloc(r->n * sizeof *r->items) : NULL;
    for (size_t i = 0; i < r->n; i++) {
        r->items[i] = from[i];
        r->items[i].lease_token = copy_or_null(from[i].lease_token);
        r->items[i].error = copy_or_null(from[i].error);
    }
    r->owns_items = true;
}

static void drop_items(request_t *r)
{
    if (r->owns_items) {
        /* The copies keep_items made: this request's own strings. */
        for (size_t i = 0; i < r->n; i++) {
            rd_free((char *)r->items[i].lease_token);
            rd_free((char *)r->items[i].error);
        }
        rd_free(r->items);
    }
    r->items = NULL;
    r->owns_items = false;
}

/* Keeps the outcomes a call gave r (the reply's strings live only during
 * its callback) and leaves it nothing more to settle. */
static void keep_outcomes(request_t *r, const rd_str_t *outcomes, size_t settled)
{
    r->outcomes = settled ? rd_malloc(settled * sizeof *r->outcomes) : NULL;
    for (size_t i = 0; i < settled; i++) {
        r->outcomes[i].ptr = rd_strndup(outcomes[i].ptr ? outcomes[i].ptr : "", outcomes[i].len);
        r->outcomes[i].len = outcomes[i].len;
    }
    r->settled = settled;
    r->n = 0;
}

static void request_free(request_t *r)
{
    for (size_t i = 0; i < r->settled; i++) rd_free((char *)r->outcomes[i].ptr);
    rd_free(r->outcomes);
    drop_items(r);
    rd_free(r->worker);
    rd_free(r);
}

static bool same_call(const request_t *a, const request_t *b)
{
    if (a->lease.ms != b->lease.ms || a->lease.given != b->lease.given ||
        (a->worker == NULL) != (b->worker == NULL)) return false;
    return a->worker == NULL || strcmp(a->worker, b->worker) == 0;
}

/* ---------------------------------------------------------------- lines */

static line_t *line_find(rd_coalescer_t *co, rd_store_queue_t q)
{
    return (line_t *)(void *)rd_line_table_find(&co->lines, q);
}

static line_t *line_new(rd_coalescer_t *co, rd_store_queue_t q)
{
    line_t *l = rd_calloc(1, sizeof *l);
    l->co = co;
    rd_line_table_add(&co->lines, &l->key, q);
    return l;
}

static void line_free(line_t *l)
{
    rd_line_table_remove(&l->co->lines, &l->key);
    rd_free(l);
}

static void on_settled(const rd_store_settled_t *res, void *arg);

/* Sends the leading requests of l's line that make one call (the first
 * always fits: its sizes were checked when it came), taking them off the
 * line. Returns the call in flight, or NULL when it could not be sent; then
 * *refused holds its requests. */
static batch_t *send_line(line_t *l, request_t **refused)
{
    request_t *first = l->waiting, *r = first, *taken = NULL;
    size_t n = 0;
    int count = 0;
    while (r && (r == first || (same_call(first, r) && n + r->n <= RD_SETTLE_BATCH_MAX &&
                                count + r->count <= RD_CLAIM_COUNT_MAX))) {
        n += r->n;
        count += r->count;
        taken = r;
        r = r->next;
    }
    l->waiting = r;
    if (r == NULL) l->last = NULL;
    taken->next = NULL;
    batch_t *b = rd_malloc(sizeof *b);
    b->line = l;
    b->sent = first;

    rd_settlement_t *all = n ? rd_malloc(n * sizeof *all) : NULL;
    size_t at = 0;
    for (request_t *x = first; x; x = x->next) {
        if (x->n) memcpy(all + at, x->items, x->n * sizeof *all);
        at += x->n;
    }
    /* The store answers later, never from inside this call (store.h). */
    rd_store_queue_t q = { .name = l->key.name, .len = l->key.len, .shard = l->key.shard };
    rd_store_t *st = l->co->store;
    rd_shard_view_t *v = rd_store_view(st, q);
    if (v) q = rd_shard_view_at(v, q, l->key.shard);
    int rc = rd_store_settle_claim(l->co->store, q, first->lease, count, first->worker, n, all,
                                   on_settled, b);
    rd_free(all);
    /* The call has its arguments (or was refused): the copies can go. */
    for (request_t *x = first; x; x = x->next) drop_items(x);
    if (rc != 0) {
        *refused = first;
        rd_free(b);
        return NULL;
    }
    l->co->counts.calls++;
    l->out++;
    return b;
}

/* Answers each request of list with head (a failure), and frees them. A
 * request whose settlements an earlier call applied answers them, with no
 * messages: they stand whatever happens to its claim. */
static void answer_failed(request_t *list, rd_store_head_t head)
{
    while (list) {
        request_t *next = list->next;
        rd_store_settled_t part = { .head = head };
        if (list->outcomes || list->settled)
            part = (rd_store_settled_t){ .outcomes = list->outcomes, .settled = list->settled };
        list->cb(&part, list->arg);
        request_free(list);
        list = next;
    }
}

/* After the line's calls returned: every request waiting goes out at once,
 * each run of them that shares a lease and a worker in one call, in their
 * order (the link runs them in that order, as it would have alone: a request
 * that cannot share a call waits for no other call than the ones it came
 * behind). A call that cannot be sent answers its requests as unavailable;
 * their callbacks may add to the line, so this loops until none waits. A
 * line with nothing in flight is removed. */
static void line_go_on(line_t *l)
{
    while (l->waiting) {
        request_t *failed = NULL;
        if (send_line(l, &failed) == NULL)
            answer_failed(failed, (rd_store_head_t){ .status = RD_STORE_UNAVAILABLE });
    }
    if (l->out == 0) line_free(l);
}

/* A combined call's answer, split: each request gets its own settlements'
 * outcomes (in order) and the claimed messages in order, up to its count.
 * A call that claimed some but fewer than all asked for was cut short (by
 * the reply's bytes, the queue's policy, or it ran dry): a request it left
 * with none, which alone would have had one if any was claimable, keeps its
 * outcomes and goes first in the line again, to claim only. Each such call
 * answers at least its first request, or claims nothing and answers all. */
static void learn_view(rd_coalescer_t *co, const line_t *l);

static void on_settled(const rd_store_settled_t *res, void *arg)
{
    batch_t *b = arg;
    line_t *l = b->line;
    request_t *batch = b->sent;
    rd_free(b);
    l->out--;
    if (res->head.status == RD_STORE_OK && res->sharded) learn_view(l->co, l);
    size_t settlements = 0;
    for (request_t *r = batch; r; r = r->next) settlements += r->n;
    if (res->head.status != RD_STORE_OK || res->settled != settlements) {
        rd_store_head_t head = res->head;
        if (head.status == RD_STORE_OK) {
            static const char why[] = "settle_claim answered another number of outcomes";
            head = (rd_store_head_t){ .status = RD_STORE_ERROR, .detail = { why, sizeof why - 1 } };
        }
        answer_failed(batch, head);
    } else {
        size_t outcome = 0, message = 0, asked = 0;
        for (request_t *r = batch; r; r = r->next) asked += (size_t)r->count;
        bool cut = res->count > 0 && res->count < asked;
        request_t *again = NULL, *again_last = NULL;
        while (batch) {
            request_t *r = batch;
            batch = r->next;
            size_t left = res->count - message;
            rd_store_settled_t part = {
                .head = res->head,
                .outcomes = res->outcomes + outcome,
                .settled = r->n,
                .messages = res->messages + message,
                .count = left < (size_t)r->count ? left : (size_t)r->count,
                .policy_wait_ms = res->policy_wait_ms,
                .queue_known = res->queue_known,
            };
            outcome += part.settled;
            message += part.count;
            if (cut && part.count == 0 && r->count > 0) {
                if (part.settled) keep_outcomes(r, part.outcomes, part.settled);
                r->next = NULL;
                if (again_last) again_last->next = r;
                else again = r;
                again_last = r;
                continue;
            }
            if (r->outcomes || r->settled) {
                part.outcomes = r->outcomes;
                part.settled = r->settled;
            }
            r->cb(&part, r->arg);
            request_free(r);
        }
        /* Ahead of those that came during the callbacks. */
        if (again) {
            again_last->next = l->waiting;
            if (l->waiting == NULL) l->last = again_last;
            l->waiting = again;
        }
    }
    if (l->out == 0) line_go_on(l);
}

/* ------------------------------------------------------------- requests */

/* One request into the line of q's shard q.shard (today's whole path for a
 * queue of one shard). */
static int submit(rd_coalescer_t *co, rd_store_queue_t q, rd_lease_t lease, int count,
                  const char *worker, size_t n, const rd_settlement_t *items,
                  rd_store_settled_cb cb, void *arg)
{
    request_t *r = request_new(lease, count, worker, n, items, cb, arg);
    line_t *l = line_find(co, q);
    if (l) {
        /* A call for this queue is out (or its answer is being handed out):
         * this one waits for the next. */
        keep_items(r);
        if (l->last) l->last->next = r;
        else l->waiting = r;
        l->last = r;
        return 0;
    }
    l = line_new(co, q);
    l->waiting = l->last = r;
    request_t *refused = NULL;
    if (send_line(l, &refused) == NULL) {
        request_free(refused);
        line_free(l);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- sharded queues */

/* An empty claim said the queue is sharded: this daemon learns its view. */
static void learn_view(rd_coalescer_t *co, const line_t *l)
{
    rd_store_learn_view(co->store, (rd_store_queue_t){ .name = l->key.name, .len = l->key.len });
}

/* One request of a sharded queue, split by shard. */
typedef struct split {
    rd_coalescer_t *co;
    char *name;
    size_t len;
    rd_lease_t lease;
    char *worker;
    int count;
    size_t n;
    rd_settlement_t *items;         /* copies: the parts are sent over several turns */
    int *shard;                     /* each item's */
    rd_str_t *outcomes;             /* each item's, owned copies once its part answered */
    int nshards;                    /* the view's (0: no view) */
    int claim_shard, visits, max_visits;
    int pending;                    /* settle-only parts in flight */
    bool failed;
    rd_store_status_t failure;
    rd_store_settled_cb cb;
    void *arg;
} split_t;

typedef struct part {
    split_t *s;
    int shard;
} part_t;

static int shard_of_id(long long id)
{
    return rd_shards_id_valid(id) ? rd_shards_of_id(id) : 0;
}

static void split_free(split_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        rd_free((char *)s->items[i].lease_token);
        rd_free((char *)s->items[i].error);
        rd_free((char *)s->outcomes[i].ptr);
    }
    rd_free(s->items);
    rd_free(s->shard);
    rd_free(s->outcomes);
    rd_free(s->worker);
    rd_free(s->name);
    rd_free(s);
}

/* The outcomes a part's call gave the items of its shard, in their order. */
static void keep_part_outcomes(split_t *s, int shard, const rd_store_settled_t *res)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n && k < res->settled; i++) {
        if (s->shard[i] != shard || s->outcomes[i].ptr) continue;
        s->outcomes[i].ptr = rd_strndup(res->outcomes[k].ptr ? res->outcomes[k].ptr : "",
                                        res->outcomes[k].len);
        s->outcomes[i].len = res->outcomes[k].len;
        k++;
    }
}

/* Submits the part of `shard`: its items, and count (0 for a settle-only
 * part). */
static int submit_part(split_t *s, int shard, int count, rd_store_settled_cb cb, void *arg)
{
    size_t n = 0;
    rd_settlement_t *mine = s->n ? rd_malloc(s->n * sizeof *mine) : NULL;
    for (size_t i = 0; i < s->n; i++)
        if (s->shard[i] == shard && !s->outcomes[i].ptr) mine[n++] = s->items[i];
    rd_store_queue_t q = { .name = s->name, .len = s->len, .shard = shard };
    int rc = submit(s->co, q, s->lease, count, s->worker, n, mine, cb, arg);
    rd_free(mine);
    return rc;
}

static void on_claim_part(const rd_store_settled_t *res, void *arg);

/* The request's answer: the last claim's, with every outcome; after a
 * failure, the outcomes if every settlement was applied (they stand, as a
 * line's answer_failed keeps them), else the failure: LOST rather than
 * UNAVAILABLE when some part was applied. */
static void deliver(split_t *s, const rd_store_settled_t *last)
{
    rd_store_settled_t out = { .head = { .status = RD_STORE_OK } };
    size_t applied = 0;
    for (size_t i = 0; i < s->n; i++) applied += s->outcomes[i].ptr != NULL;
    if (!s->failed && last) {
        out = *last;
        out.outcomes = s->outcomes;
        out.settled = s->n;
    } else if (s->n > 0 && applied == s->n) {
        out.outcomes = s->outcomes;
        out.settled = s->n;
    } else {
        out.head.status = s->failed ? s->failure : RD_STORE_UNAVAILABLE;
        if (applied > 0 && out.head.status == RD_STORE_UNAVAILABLE) out.head.status = RD_STORE_LOST;
    }
    s->cb(&out, s->arg);
    split_free(s);
}

static void claim_now(split_t *s)
{
    if (submit_part(s, s->claim_shard, s->count, on_claim_part, s) != 0) {
        s->failed = true;
        s->failure = RD_STORE_UNAVAILABLE;
        deliver(s, NULL);
    }
}

static void on_settle_part(const rd_store_settled_t *res, void *arg)
{
    part_t *p = arg;
    split_t *s = p->s;
    if (res->head.status != RD_STORE_OK) {
        if (!s->failed) s->failure = res->head.status;
        s->failed = true;
    } else {
        keep_part_outcomes(s, p->shard, res);
    }
    rd_free(p);
    if (--s->pending == 0) {
        if (s->failed) deliver(s, NULL);
        else claim_now(s);
    }
}

static void on_claim_part(const rd_store_settled_t *res, void *arg)
{
    split_t *s = arg;
    if (res->head.status != RD_STORE_OK) {
        s->failed = true;
        s->failure = res->head.status;
        deliver(s, NULL);
        return;
    }
    keep_part_outcomes(s, s->claim_shard, res);
    s->visits++;
    if (res->count == 0 && s->count > 0 && s->visits < s->max_visits) {
        /* Nothing here: the next shard. */
        s->claim_shard = (s->claim_shard + 1) % s->nshards;
        claim_now(s);
        return;
    }
    deliver(s, res);
}

static int split_submit(rd_coalescer_t *co, rd_store_queue_t q, rd_shard_view_t *v,
                        rd_lease_t lease, int count, const char *worker, size_t n,
                        const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    split_t *s = rd_calloc(1, sizeof *s);
    s->co = co;
    s->name = rd_strndup(q.name, q.len);
    s->len = q.len;
    s->lease = lease;
    s->worker = copy_or_null(worker);
    s->count = count;
    s->n = n;
    s->items = n ? rd_malloc(n * sizeof *s->items) : NULL;
    s->shard = n ? rd_malloc(n * sizeof *s->shard) : NULL;
    s->outcomes = n ? rd_calloc(n, sizeof *s->outcomes) : NULL;
    for (size_t i = 0; i < n; i++) {
        s->items[i] = items[i];
        s->items[i].lease_token = copy_or_null(items[i].lease_token);
        s->items[i].error = copy_or_null(items[i].error);
        s->shard[i] = shard_of_id(items[i].id);
    }
    s->nshards = v ? v->n : 0;
    s->claim_shard = n ? s->shard[0] : (v ? (int)(v->next++ % (unsigned)v->n) : 0);
    s->max_visits = v ? (v->n < 3 ? v->n : 3) : 1;
    s->cb = cb;
    s->arg = arg;
    /* Settle-only parts first (every other shard among the settlements). */
    s->pending = 1;
    bool seen[RD_SHARDS_MAX] = { false };
    seen[s->claim_shard] = true;
    for (size_t i = 0; i < n; i++) {
        int k = s->shard[i];
        if (seen[k]) continue;
        seen[k] = true;
        part_t *p = rd_malloc(sizeof *p);
        p->s = s;
        p->shard = k;
        s->pending++;
        if (submit_part(s, k, 0, on_settle_part, p) != 0) {
            rd_free(p);
            s->pending--;
            s->failed = true;
            s->failure = RD_STORE_UNAVAILABLE;
        }
    }
    if (--s->pending == 0) {
        /* Nothing else in flight: a part not sent is the caller's -1. */
        if (s->failed || submit_part(s, s->claim_shard, s->count, on_claim_part, s) != 0) {
            split_free(s);
            return -1;
        }
    }
    return 0;
}

int rd_coalescer_settle_claim(rd_coalescer_t *co, rd_store_queue_t q, rd_lease_t lease,
                              int count, const char *worker, size_t n,
                              const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    if (n > RD_SETTLE_BATCH_MAX || count < 0 || count > RD_CLAIM_COUNT_MAX) return -1;
    rd_shard_view_t *v = rd_store_view(co->store, q);
    bool elsewhere = false;
    for (size_t i = 0; i < n && !elsewhere; i++) elsewhere = shard_of_id(items[i].id) > 0;
    q.shard = 0;
    int rc = v == NULL && !elsewhere ? submit(co, q, lease, count, worker, n, items, cb, arg)
                                     : split_submit(co, q, v, lease, count, worker, n, items, cb,
                                                    arg);
    if (rc == 0) co->counts.requests++;   /* once, however many parts */
    return rc;
}

void rd_coalescer_render_metrics(const rd_coalescer_t *co, rd_buf_t *out)
{
    rd_buf_printf(out,
                  "# HELP retryd_settle_claim_requests_total Settle-and-claim requests this "
                  "instance accepted.\n"
                  "# TYPE retryd_settle_claim_requests_total counter\n"
                  "retryd_settle_claim_requests_total %llu\n"
                  "# HELP retryd_settle_claim_calls_total settle_claim function calls they took "
                  "(fewer: requests for one queue sent together, docs/coalescing.md).\n"
                  "# TYPE retryd_settle_claim_calls_total counter\n"
                  "retryd_settle_claim_calls_total %llu\n",
                  co->counts.requests, co->counts.calls);
}

static void free_list(request_t *r)
{
    while (r) {
        request_t *next = r->next;
        request_free(r);
        r = next;
    }
}

static void line_drop(rd_line_key_t *k, void *arg)
{
    (void)arg;
    line_t *l = (line_t *)(void *)k;
    free_list(l->waiting);
    rd_free(l);
}

void rd_coalescer_free(rd_coalescer_t *co)
{
    if (co == NULL) return;
    rd_line_table_clear(&co->lines, line_drop, NULL);
    rd_free(co);
}
