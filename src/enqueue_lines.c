/* enqueue_lines.c - single enqueues of one queue sent together
 * (docs/coalescing.md "Enqueues", include/retryd/enqueue_lines.h).
 *
 * A queue with an enqueue call in flight has a line: the requests that came
 * for it since wait there, in arrival order, with copies of what they send.
 * When the call returns and its requests are answered, the waiting ones go
 * out: the first run that fits one enqueue_many call, as one call (a run of
 * one as a plain enqueue). One call per line at a time keeps the arrival
 * order, also when a short answer (store.h, rd_store_enqueued_many_t) sends
 * items again. A line with nothing in flight and nothing waiting is removed
 * (queue_lines.h: the table is bounded by the calls in flight).
 *
 * A sharded queue (docs/sharding.md) has a line per shard: a request joins
 * the line of the shard its view places it on (shard_view.h), tried in
 * turn while the shard answers that its group or key is not there (MOVED).
 * A placement the view was wrong for (RESHARD: the view is read again from
 * shard 0; COPY: shard 0's policy is copied to the shards; FULL) is placed
 * again once; a second refusal is its answer. */
#include "retryd/enqueue_lines.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/queue_lines.h"
#include "retryd/shard_admin.h"
#include "retryd/shard_view.h"

typedef struct request {
    struct request *next;
    rd_enqueue_t e;                 /* its strings are the copies below */
    char *payload, *group, *idempotency_key, *attributes;
    rd_store_messages_cb cb;
    void *arg;
    rd_shard_attempts_t attempts;   /* where it goes, in turn (shard 0 alone: unsharded) */
    int attempt;
    /* Placed again once after each of RESHARD, COPY and FULL: a second of
     * one kind is its answer (a RESHARD then a COPY is the order after a
     * raise whose copies lag: both are taken). */
    bool resharded, copied, refilled;
} request_t;

typedef struct line {
    rd_line_key_t key;              /* its queue, in el->lines (first) */
    rd_enqueue_lines_t *el;
    request_t *waiting, *last;      /* in arrival order */
    bool busy;                      /* a call in flight */
} line_t;

/* One call in flight: a plain enqueue of one request, or an enqueue_many
 * of sent. */
typedef struct call {
    line_t *line;
    request_t *sent;                /* the copies it carries, in order */
    size_t n;
} call_t;

struct rd_enqueue_lines {
    rd_store_t *store;
    rd_line_table_t lines;
    struct {
        unsigned long long requests;    /* accepted, since start */
        unsigned long long waited;      /* of them, sent after waiting in a line */
        unsigned long long calls;       /* enqueue and enqueue_many calls they took */
    } counts;
};

rd_enqueue_lines_t *rd_enqueue_lines_new(rd_store_t *store)
{
    rd_enqueue_lines_t *el = rd_calloc(1, sizeof *el);
    el->store = store;
    return el;
}

/* ------------------------------------------------------------- requests */

static char *copy_bytes(const char *s, size_t len)
{
    if (s == NULL) return NULL;
    char *c = rd_malloc(len + 1);
    memcpy(c, s, len);
    c[len] = '\0';
    return c;
}

static request_t *request_new(const rd_enqueue_t *e, rd_store_messages_cb cb, void *arg)
{
    request_t *r = rd_calloc(1, sizeof *r);
    r->e = *e;
    r->payload = copy_bytes(e->payload, e->len);
    r->group = e->group ? rd_strdup(e->group) : NULL;
    r->idempotency_key = e->idempotency_key ? rd_strdup(e->idempotency_key) : NULL;
    r->attributes = copy_bytes(e->attributes, e->attributes_len);
    r->e.payload = r->payload;
    r->e.group = r->group;
    r->e.idempotency_key = r->idempotency_key;
    r->e.attributes = r->attributes;
    r->cb = cb;
    r->arg = arg;
    return r;
}

static void request_free(request_t *r)
{
    rd_free(r->payload);
    rd_free(r->group);
    rd_free(r->idempotency_key);
    rd_free(r->attributes);
    rd_free(r);
}

static size_t request_bytes(const request_t *r)
{
    return r->e.len + (r->e.attributes ? r->e.attributes_len : 0);
}

/* ------------------------------------------------------------- lines */

static line_t *line_find(rd_enqueue_lines_t *el, rd_store_queue_t q)
{
    return (line_t *)(void *)rd_line_table_find(&el->lines, q);
}

static rd_store_queue_t line_queue(const line_t *l)
{
    return (rd_store_queue_t){ .name = l->key.name, .len = l->key.len, .shard = l->key.shard };
}

static line_t *line_new(rd_enqueue_lines_t *el, rd_store_queue_t q)
{
    line_t *l = rd_calloc(1, sizeof *l);
    l->el = el;
    rd_line_table_add(&el->lines, &l->key, q);
    return l;
}

static void line_free(line_t *l)
{
    rd_line_table_remove(&l->el->lines, &l->key);
    rd_free(l);
}

/* Answers a request that was never sent, or whose shared call failed, as
 * its own call would have been answered. */
static void answer_failed(request_t *r, const rd_store_head_t *head)
{
    rd_store_messages_t res;
    memset(&res, 0, sizeof res);
    res.head = *head;
    res.policy_wait_ms = -1;
    res.queue_known = true;
    r->cb(&res, r->arg);
}

static void drain(line_t *l);
static void place(rd_enqueue_lines_t *el, rd_store_queue_t q, request_t *r);

/* Where r goes by q's view now, from its first attempt. */
static void route(rd_enqueue_lines_t *el, rd_store_queue_t q, request_t *r)
{
    rd_store_t *st = el->store;
    rd_shard_view_t *v = rd_store_view(st, q);
    rd_shard_view_attempts(v, &r->e, rd_store_now_ms(st), &r->attempts);
    r->attempt = 0;
    r->e.only_present = r->attempts.n > 1;
}

/* Requests placed again after the view was read (or the policy copied):
 * re-routed, each to its line. */
typedef struct again {
    rd_enqueue_lines_t *el;
    char *name;
    size_t len;
    request_t *requests;
    bool reroute;                   /* RESHARD: by the new view; COPY: the same shard */
} again_t;

static void place_again(again_t *a)
{
    rd_store_queue_t q = { .name = a->name, .len = a->len };
    for (request_t *r = a->requests; r;) {
        request_t *next = r->next;
        r->next = NULL;
        if (a->reroute) route(a->el, q, r);
        place(a->el, q, r);
        r = next;
    }
    rd_free(a->name);
    rd_free(a);
}

static void on_view_read(const rd_store_strings_t *res, void *arg)
{
    again_t *a = arg;
    rd_store_t *st = a->el->store;
    rd_store_queue_t q = { .name = a->name, .len = a->len };
    if (res->head.status == RD_STORE_OK)
        rd_shard_views_learn(rd_store_views(st), q, res->strings, res->count, rd_store_now_ms(st));
    place_again(a);
}

static void on_policy_copied(const rd_shard_admin_result_t *res, void *arg)
{
    (void)res;   /* a copy that failed: the next placement answers it */
    place_again(arg);
}

/* Placement outcomes: whether r is to be placed again (the view read anew,
 * or the policy copied, first). */
static bool again_after(request_t *r, rd_store_status_t status)
{
    bool *once = status == RD_STORE_RESHARD ? &r->resharded
                 : status == RD_STORE_COPY ? &r->copied
                 : status == RD_STORE_FULL ? &r->refilled : NULL;
    if (once == NULL || *once) return false;
    *once = true;
    return true;
}

/* Sends again what came back for placement: reads the view or copies the
 * policy first (one call for all of them), then places each. */
static void send_again(rd_enqueue_lines_t *el, const line_t *l, request_t *list, bool copy)
{
    if (list == NULL) return;
    again_t *a = rd_calloc(1, sizeof *a);
    a->el = el;
    a->name = rd_strndup(l->key.name, l->key.len);
    a->len = l->key.len;
    a->requests = list;
    a->reroute = !copy;
    rd_store_queue_t q0 = { .name = a->name, .len = a->len };
    int rc = copy ? rd_shard_admin_copy(el->store, q0, on_policy_copied, a)
                  : rd_store_policy_pairs(el->store, q0, on_view_read, a);
    if (rc != 0) place_again(a);   /* Redis is away: the placement answers it */
}

/* What came back of a call to be placed again: MOVED ones go to their
 * next shard at once; RESHARD and FULL ones after the view is read again;
 * COPY ones after the copies. */
typedef struct outcome {
    request_t *moved, *reread, *copy;
} outcome_t;

static void push(request_t **list, request_t *r)
{
    r->next = *list;
    *list = r;
}

/* One request's result: answered, or kept in o to be placed again. */
static void settle_one(request_t *r, const rd_store_messages_t *res, outcome_t *o)
{
    rd_store_status_t status = res->head.status;
    if (status == RD_STORE_MOVED && r->attempt + 1 < r->attempts.n) {
        r->attempt++;
        r->e.only_present = r->attempt + 1 < r->attempts.n;
        push(&o->moved, r);
        return;
    }
    if (again_after(r, status)) {
        push(status == RD_STORE_COPY ? &o->copy : &o->reread, r);
        return;
    }
    r->cb(res, r->arg);
    request_free(r);
}

static void after_call(rd_enqueue_lines_t *el, line_t *l, outcome_t *o)
{
    rd_store_queue_t q = { .name = l->key.name, .len = l->key.len };
    for (request_t *r = o->moved; r;) {
        request_t *next = r->next;
        r->next = NULL;
        place(el, q, r);
        r = next;
    }
    send_again(el, l, o->reread, false);
    send_again(el, l, o->copy, true);
}

static void on_one(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    line_t *l = c->line;
    rd_enqueue_lines_t *el = l->el;
    outcome_t o = { 0 };
    l->busy = true;   /* answers may enqueue here: they wait */
    settle_one(c->sent, res, &o);
    rd_free(c);
    after_call(el, l, &o);
    l->busy = false;
    drain(l);
}

static void on_many(const rd_store_enqueued_many_t *res, void *arg)
{
    call_t *c = arg;
    line_t *l = c->line;
    rd_enqueue_lines_t *el = l->el;
    request_t *r = c->sent;
    outcome_t o = { 0 };
    size_t i = 0;
    l->busy = true;
    if (res->head.status == RD_STORE_RESHARD || res->head.status == RD_STORE_COPY) {
        /* The whole call refused: nothing written. */
        rd_store_messages_t refused;
        memset(&refused, 0, sizeof refused);
        refused.head.status = res->head.status;
        refused.policy_wait_ms = -1;
        refused.queue_known = true;
        for (; r;) {
            request_t *next = r->next;
            settle_one(r, &refused, &o);
            r = next;
        }
    } else if (res->head.status != RD_STORE_OK) {
        for (; r; i++) {
            request_t *next = r->next;
            answer_failed(r, &res->head);
            request_free(r);
            r = next;
        }
    } else {
        for (; r && i < res->count; i++) {
            request_t *next = r->next;
            settle_one(r, &res->items[i], &o);
            r = next;
        }
        if (r) {
            /* A short answer: the rest were not done (nothing of them
             * written); they go first in the next call. */
            request_t *tail = r;
            while (tail->next) tail = tail->next;
            tail->next = l->waiting;
            if (l->waiting == NULL) l->last = tail;
            l->waiting = r;
        }
    }
    rd_free(c);
    after_call(el, l, &o);
    l->busy = false;
    drain(l);
}

/* Sends the first run of waiting requests that fits one call, or removes
 * the line when nothing waits. */
static void drain(line_t *l)
{
    if (l->busy) return;  /* a callback above sent for it already */
    if (l->waiting == NULL) {
        line_free(l);
        return;
    }
    rd_enqueue_lines_t *el = l->el;
    size_t n = 0, bytes = 0;
    request_t *end = l->waiting;
    while (end && n < RD_ENQUEUE_MANY_MAX &&
           (n == 0 || bytes + request_bytes(end) <= RD_ENQUEUE_MANY_BYTES)) {
        bytes += request_bytes(end);
        n++;
        end = end->next;
    }
    /* Take [waiting, end) off the line. */
    request_t *run = l->waiting, *last = run;
    for (size_t i = 1; i < n; i++) last = last->next;
    l->waiting = last->next;
    if (l->waiting == NULL) l->last = NULL;
    last->next = NULL;

    call_t *c = rd_calloc(1, sizeof *c);
    c->line = l;
    c->sent = run;
    c->n = n;
    /* The view as it is now: its salts and rev go with the call. */
    rd_store_queue_t q = line_queue(l);
    if (q.shard > 0 || rd_store_views(el->store)) {
        rd_shard_view_t *v = rd_store_view(el->store, q);
        if (v) q = rd_shard_view_at(v, q, l->key.shard);
    }
    int rc;
    if (n == 1) {
        rc = rd_store_enqueue(el->store, q, &run->e, on_one, c);
    } else {
        rd_enqueue_t *items = rd_malloc(n * sizeof *items);
        size_t i = 0;
        for (request_t *r = run; r; r = r->next) items[i++] = r->e;
        rc = rd_store_enqueue_many(el->store, q, items, n, on_many, c);
        rd_free(items);
    }
    if (rc == 0) {
        l->busy = true;
        el->counts.calls++;
        return;
    }
    /* Not sent (Redis is away): each is answered as its own call, not
     * sent, would have been, and the next run is tried. */
    rd_free(c);
    rd_store_head_t head = { .status = RD_STORE_UNAVAILABLE };
    l->busy = true;  /* the answers below may enqueue here: they wait */
    while (run) {
        request_t *next = run->next;
        answer_failed(run, &head);
        request_free(run);
        run = next;
    }
    l->busy = false;
    drain(l);
}

/* r into the line of its shard now (a new line sends it at once). */
static void place(rd_enqueue_lines_t *el, rd_store_queue_t q, request_t *r)
{
    if (r->attempts.n == 0) route(el, q, r);
    q.shard = r->attempts.shard[r->attempt];
    line_t *l = line_find(el, q);
    if (l == NULL) l = line_new(el, q);
    if (l->last) l->last->next = r;
    else l->waiting = r;
    l->last = r;
    drain(l);
}

int rd_enqueue_lines_enqueue(rd_enqueue_lines_t *el, rd_store_queue_t q, const rd_enqueue_t *e,
                             rd_store_messages_cb cb, void *arg)
{
    /* Redis away: -1 at once, as a call sent at once would (cb never runs). */
    if (!rd_store_ready(el->store)) return -1;
    request_t *r = request_new(e, cb, arg);
    route(el, q, r);
    q.shard = r->attempts.shard[0];
    line_t *l = line_find(el, q);
    el->counts.requests++;
    if (l && (l->busy || l->waiting)) el->counts.waited++;
    place(el, q, r);
    return 0;
}

void rd_enqueue_lines_render_metrics(const rd_enqueue_lines_t *el, rd_buf_t *out)
{
    rd_buf_printf(out,
                  "# HELP retryd_enqueue_requests_total Single enqueues this instance accepted "
                  "(HTTP and SendMessage; batches not counted).\n"
                  "# TYPE retryd_enqueue_requests_total counter\n"
                  "retryd_enqueue_requests_total %llu\n"
                  "# HELP retryd_enqueue_waited_total Of them, those that waited for an enqueue "
                  "of their queue in flight (then sent in the next call, with the others that "
                  "waited).\n"
                  "# TYPE retryd_enqueue_waited_total counter\n"
                  "retryd_enqueue_waited_total %llu\n"
                  "# HELP retryd_enqueue_calls_total enqueue and enqueue_many function calls "
                  "they took (fewer: enqueues of one queue sent together, docs/coalescing.md).\n"
                  "# TYPE retryd_enqueue_calls_total counter\n"
                  "retryd_enqueue_calls_total %llu\n",
                  el->counts.requests, el->counts.waited, el->counts.calls);
}

static void line_drop(rd_line_key_t *k, void *arg)
{
    (void)arg;
    line_t *l = (line_t *)(void *)k;
    for (request_t *r = l->waiting; r;) {
        request_t *next = r->next;
        request_free(r);
        r = next;
    }
    rd_free(l);
}

void rd_enqueue_lines_free(rd_enqueue_lines_t *el)
{
    if (el == NULL) return;
    rd_line_table_clear(&el->lines, line_drop, NULL);
    rd_free(el);
}
