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
 * (queue_lines.h: the table is bounded by the calls in flight). */
#include "retryd/enqueue_lines.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/queue_lines.h"

typedef struct request {
    struct request *next;
    rd_enqueue_t e;                 /* its strings are the copies below */
    char *payload, *group, *idempotency_key, *attributes;
    rd_store_messages_cb cb;
    void *arg;
} request_t;

typedef struct line {
    rd_line_key_t key;              /* its queue, in el->lines (first) */
    rd_enqueue_lines_t *el;
    request_t *waiting, *last;      /* in arrival order */
    bool busy;                      /* a call in flight */
} line_t;

/* One call in flight: a plain enqueue of one request (the caller's own, not
 * copied, when it was sent at once), or an enqueue_many of sent. */
typedef struct call {
    line_t *line;
    request_t *sent;                /* the copies it carries, in order (NULL: direct) */
    size_t n;
    rd_store_messages_cb cb;        /* direct */
    void *arg;
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

static void on_one(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    line_t *l = c->line;
    if (c->sent) {
        c->sent->cb(res, c->sent->arg);
        request_free(c->sent);
    } else {
        c->cb(res, c->arg);
    }
    rd_free(c);
    l->busy = false;
    drain(l);
}

static void on_many(const rd_store_enqueued_many_t *res, void *arg)
{
    call_t *c = arg;
    line_t *l = c->line;
    request_t *r = c->sent;
    size_t i = 0;
    if (res->head.status != RD_STORE_OK) {
        for (; r; i++) {
            request_t *next = r->next;
            answer_failed(r, &res->head);
            request_free(r);
            r = next;
        }
    } else {
        for (; r && i < res->count; i++) {
            request_t *next = r->next;
            r->cb(&res->items[i], r->arg);
            request_free(r);
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
    rd_store_queue_t q = { .name = l->key.name, .len = l->key.len };
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

int rd_enqueue_lines_enqueue(rd_enqueue_lines_t *el, rd_store_queue_t q, const rd_enqueue_t *e,
                             rd_store_messages_cb cb, void *arg)
{
    line_t *l = line_find(el, q);
    if (l && (l->busy || l->waiting)) {
        request_t *r = request_new(e, cb, arg);
        if (l->last) l->last->next = r;
        else l->waiting = r;
        l->last = r;
        el->counts.requests++;
        el->counts.waited++;
        return 0;
    }
    call_t *c = rd_calloc(1, sizeof *c);
    c->cb = cb;
    c->arg = arg;
    if (l == NULL) l = line_new(el, q);
    c->line = l;
    if (rd_store_enqueue(el->store, q, e, on_one, c) != 0) {
        rd_free(c);
        line_free(l);
        return -1;
    }
    l->busy = true;
    el->counts.requests++;
    el->counts.calls++;
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
