/* waiters.c - long-poll claims: per-queue FIFO lines of parked claims, the
 * notification link that wakes them, and the claims made on their behalf.
 * The design, and why nothing is lost, is in docs/long-poll.md. */
#include "retryd/waiters.h"

#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/keyed_hash.h"
#include "retryd/keys.h"
#include "retryd/log.h"
#include "retryd/shard_view.h"

enum {
    SWEEP_EVERY_MS = 250,
    /* A queue whose last waiter left keeps its subscription this long, so a
     * worker that polls in a loop causes no subscribe/unsubscribe churn. */
    UNSUBSCRIBE_AFTER_IDLE_MS = 1000,
    /* Queues released in one sweep at most; a full batch sweeps again on the
     * next loop turn, so thousands go within a second without one long turn. */
    RELEASE_BATCH = 1000,
    MIN_BUCKETS = 64,
};

typedef enum sub_state { SUB_NONE, SUB_PENDING, SUB_ACTIVE, SUB_LEAVING } sub_state_t;

typedef struct wqueue wqueue_t;

typedef struct waiter {
    wqueue_t *q;
    rd_http_exchange_t *ex;
    rd_lease_t lease;
    int count;
    char *worker;               /* the claim's worker, or NULL */
    rd_store_messages_cb cb;    /* NULL once answered */
    void *arg;
    uv_timer_t deadline;
    bool expired;               /* the deadline passed while its claim was in flight */
    struct waiter *prev, *next;
} waiter_t;

struct wqueue {
    rd_waiters_t *w;
    char *name;
    size_t len;
    rd_buf_t channel;           /* "<prefix>:{<q>}:wake" */
    waiter_t *head, *tail;      /* first come, first served */
    size_t n;
    waiter_t *serving;          /* the head while a claim for it is in flight */
    bool again;                 /* a wake-up arrived during that claim */
    /* A sharded queue (docs/sharding.md): a serving visits every shard in
     * turn until one has work. */
    int visit, visits_left, nshards;
    bool next_visit;            /* the visits go on: not a wake-up (again stays) */
    uv_timer_t *token;          /* the queue's rate limit held a claim back: claims again
                                   when its next token is due (NULL until first needed) */
    sub_state_t sub;
    uint64_t hash;              /* rd_keyed_hash of name */
    wqueue_t *hnext;            /* next in its bucket */
    uint64_t idle_since_ms;     /* when n last fell to 0 */
    bool idle;                  /* on the idle list: no waiter, not yet released */
    wqueue_t *idle_prev, *idle_next;
    wqueue_t *prev, *next;
};

struct rd_waiters {
    uv_loop_t *loop;
    rd_store_t *store;
    rd_redis_t *notify;
    char *prefix;
    wqueue_t *queues;           /* every queue, for the rounds over all of them */
    wqueue_t **buckets;         /* name -> queue, chained; nbuckets a power of 2 */
    rd_keyed_hash_t *hash;      /* keyed: the names are the clients' (keyed_hash.h) */
    size_t nbuckets, nqueues;
    wqueue_t *idle_head, *idle_tail; /* queues without waiters, oldest idle first */
    size_t parked;
    uv_timer_t sweep;
    bool stopping;              /* rd_waiters_stop: parks are answered at once */
    bool closing;               /* rd_waiters_close: freed once no claim is in flight */
    size_t claims_in_flight;
    void (*on_closed)(void *arg);
    void *on_closed_arg;
};

static void serve(wqueue_t *q);
static void maybe_finish_stop(rd_waiters_t *w);

/* ---------------------------------------------------------------- queues */

static wqueue_t *find_queue(rd_waiters_t *w, const char *name, size_t len)
{
    uint64_t hash = rd_keyed_hash(w->hash, name, len);
    for (wqueue_t *q = w->buckets[hash & (w->nbuckets - 1)]; q; q = q->hnext)
        if (q->hash == hash && q->len == len && memcmp(q->name, name, len) == 0) return q;
    return NULL;
}

/* Re-spreads every queue over nbuckets buckets (a power of 2). */
static void rehash(rd_waiters_t *w, size_t nbuckets)
{
    rd_free(w->buckets);
    w->buckets = rd_calloc(nbuckets, sizeof *w->buckets);
    w->nbuckets = nbuckets;
    for (wqueue_t *q = w->queues; q; q = q->next) {
        wqueue_t **b = &w->buckets[q->hash & (nbuckets - 1)];
        q->hnext = *b;
        *b = q;
    }
}

static void idle_remove(rd_waiters_t *w, wqueue_t *q)
{
    if (!q->idle) return;
    if (q->idle_prev) q->idle_prev->idle_next = q->idle_next;
    else w->idle_head = q->idle_next;
    if (q->idle_next) q->idle_next->idle_prev = q->idle_prev;
    else w->idle_tail = q->idle_prev;
    q->idle_prev = q->idle_next = NULL;
    q->idle = false;
}

/* q has no waiter since now: the sweep releases it once idle long enough. */
static void idle_append(rd_waiters_t *w, wqueue_t *q, uint64_t now)
{
    idle_remove(w, q);
    q->idle_since_ms = now;
    q->idle = true;
    q->idle_prev = w->idle_tail;
    if (w->idle_tail) w->idle_tail->idle_next = q;
    else w->idle_head = q;
    w->idle_tail = q;
}

static wqueue_t *get_queue(rd_waiters_t *w, rd_store_queue_t queue)
{
    wqueue_t *q = find_queue(w, queue.name, queue.len);
    if (q) return q;
    q = rd_calloc(1, sizeof *q);
    q->w = w;
    q->name = rd_strndup(queue.name, queue.len);
    q->len = queue.len;
    rd_keys_wake(&q->channel, w->prefix, queue.name, queue.len);
    q->hash = rd_keyed_hash(w->hash, queue.name, queue.len);
    q->next = w->queues;
    if (w->queues) w->queues->prev = q;
    w->queues = q;
    if (++w->nqueues > w->nbuckets) {
        rehash(w, w->nbuckets * 2);
    } else {
        wqueue_t **b = &w->buckets[q->hash & (w->nbuckets - 1)];
        q->hnext = *b;
        *b = q;
    }
    return q;
}

static void on_token_closed(uv_handle_t *h)
{
    rd_free(h);
}

static void free_queue(rd_waiters_t *w, wqueue_t *q)
{
    if (q->token) uv_close((uv_handle_t *)q->token, on_token_closed);
    idle_remove(w, q);
    wqueue_t **b = &w->buckets[q->hash & (w->nbuckets - 1)];
    while (*b != q) b = &(*b)->hnext;
    *b = q->hnext;
    if (q->prev) q->prev->next = q->next;
    else w->queues = q->next;
    if (q->next) q->next->prev = q->prev;
    w->nqueues--;
    /* Shrink, with hysteresis, so a burst of names does not pin its table. */
    if (w->nbuckets > MIN_BUCKETS && w->nqueues < w->nbuckets / 4 && !w->closing)
        rehash(w, w->nbuckets / 2);
    rd_buf_free(&q->channel);
    rd_free(q->name);
    rd_free(q);
}

/* ---------------------------------------------------------------- waiters */

static void on_waiter_closed(uv_handle_t *h)
{
    waiter_t *waiter = h->data;
    rd_free(waiter->worker);
    rd_free(waiter);
}

/* Answers the waiter (exactly once) and takes it out of its line. */
static void finish_waiter(waiter_t *h, const rd_store_messages_t *res)
{
    wqueue_t *q = h->q;
    rd_waiters_t *w = q->w;
    if (h->prev) h->prev->next = h->next;
    else q->head = h->next;
    if (h->next) h->next->prev = h->prev;
    else q->tail = h->prev;
    q->n--;
    w->parked--;
    if (q->n == 0) idle_append(w, q, uv_now(w->loop));
    rd_store_messages_cb cb = h->cb;
    h->cb = NULL;
    uv_timer_stop(&h->deadline);
    uv_close((uv_handle_t *)&h->deadline, on_waiter_closed);
    cb(res, h->arg);
}

static void answer_nothing(waiter_t *h)
{
    rd_store_messages_t none;
    memset(&none, 0, sizeof none);
    none.head.status = RD_STORE_OK;
    none.policy_wait_ms = -1;
    none.queue_known = true;   /* a wait says nothing of it: the caller asked first */
    finish_waiter(h, &none);
}

static void on_deadline(uv_timer_t *t)
{
    waiter_t *h = t->data;
    if (h->q->serving == h) {
        h->expired = true;  /* answered when its claim returns */
    } else if (!rd_store_ready(h->q->w->store)) {
        /* Redis went away while it waited: say so rather than "nothing due". */
        rd_store_messages_t away;
        memset(&away, 0, sizeof away);
        away.head.status = RD_STORE_UNAVAILABLE;
        finish_waiter(h, &away);
    } else {
        answer_nothing(h);
    }
}

/* ---------------------------------------------------------------- claims */

static void on_token_due(uv_timer_t *t)
{
    wqueue_t *q = t->data;
    if (q->n > 0) serve(q);
}

/* The rate limit held the claim back: no notification says a token came
 * back, so claim again when it is due (docs/flow-control.md). */
static void retry_when_token_due(wqueue_t *q, long long retry_ms)
{
    if (q->token == NULL) {
        q->token = rd_malloc(sizeof *q->token);
        uv_timer_init(q->w->loop, q->token);
        q->token->data = q;
    }
    uv_timer_start(q->token, on_token_due, (uint64_t)retry_ms, 0);
}

static void on_claim(const rd_store_messages_t *res, void *arg)
{
    wqueue_t *q = arg;
    rd_waiters_t *w = q->w;
    waiter_t *h = q->serving;
    q->serving = NULL;
    w->claims_in_flight--;
    int left = q->visits_left;
    q->visits_left = 0;   /* the visits end here unless the next shard is next */
    if (res->head.status == RD_STORE_OK && res->sharded) {
        rd_store_queue_t queue = { .name = q->name, .len = q->len };
        rd_store_learn_view(w->store, queue);
    }

    if (res->head.status != RD_STORE_OK) {
        finish_waiter(h, res);
    } else if (res->count == 0 && left > 1 && res->retry_ms == 0 && !h->expired &&
               !w->stopping) {
        /* Nothing on this shard: the next one, for the same waiter. */
        q->visits_left = left - 1;
        q->visit = (q->visit + 1) % q->nshards;
        q->next_visit = true;   /* a wake-up meanwhile (again) starts new visits after */
    } else if (res->count > 0) {
        if (!rd_http_exchange_client_alive(h->ex)) {
            /* The client left during the claim: the messages go straight back. */
            rd_store_queue_t queue = { .name = q->name, .len = q->len };
            rd_store_release_orphans(w->store, queue, res->count, res->messages);
            answer_nothing(h);
        } else {
            finish_waiter(h, res);
        }
        q->again = true;  /* there may be more for the next in line */
    } else if (h->expired || w->stopping) {
        answer_nothing(h);
    } else if (res->retry_ms > 0) {
        retry_when_token_due(q, res->retry_ms);
    } else if (res->sharded && q->nshards <= 1) {
        /* Shard 0 alone was asked, of a sharded queue this daemon had no
         * view of: once the view is read (above), every shard. */
        retry_when_token_due(q, 20);
    }

    if (w->stopping) {
        maybe_finish_stop(w);
        return;
    }
    if ((q->again || q->next_visit) && q->n > 0) serve(q);
    else q->next_visit = false;
}

/* Claims for the waiter at the head of q's line; one claim per queue at a time. */
static void serve(wqueue_t *q)
{
    rd_waiters_t *w = q->w;
    if (w->stopping) return;
    if (q->serving) {
        q->again = true;
        return;
    }
    while (q->head && !rd_http_exchange_client_alive(q->head->ex)) answer_nothing(q->head);
    /* Answering a departed waiter can run that connection's next pipelined
     * request at once, and a long-poll there parks and serves this queue:
     * then a claim is already in flight and must not be sent twice. */
    if (q->serving || w->stopping) return;
    waiter_t *h = q->head;
    /* Going on to the next shard keeps a wake-up that came meanwhile: the
     * shards visited before it are visited again after. */
    if (q->next_visit) q->next_visit = false;
    else q->again = false;
    if (h == NULL) {
        q->visits_left = 0;
        return;
    }
    rd_store_queue_t queue = { .name = q->name, .len = q->len };
    rd_shard_view_t *v = rd_store_view(w->store, queue);
    if (q->visits_left <= 0) {
        q->nshards = v ? v->n : 1;
        q->visits_left = q->nshards;
        q->visit = v ? (int)(v->next++ % (unsigned)v->n) : 0;
    }
    if (v && q->visit < v->n) queue = rd_shard_view_at(v, queue, q->visit);
    else q->visits_left = 1;   /* the view went (or shrank): shard 0 alone */
    if (rd_store_claim(w->store, queue, h->lease, h->count, h->worker, on_claim, q) != 0) {
        q->visits_left = 0;
        return;  /* Redis is away: stay parked; the deadline answers */
    }
    q->serving = h;
    w->claims_in_flight++;
}

/* ---------------------------------------------------------------- notifications */

static void on_pubsub(rd_pubsub_event_t event, void *arg)
{
    wqueue_t *q = arg;
    switch (event) {
    case RD_PUBSUB_SUBSCRIBED:
        q->sub = SUB_ACTIVE;
        serve(q);  /* anything that arrived before the subscription took effect */
        break;
    case RD_PUBSUB_MESSAGE:
        if (q->n > 0) serve(q);
        break;
    case RD_PUBSUB_UNSUBSCRIBED:
    case RD_PUBSUB_DROPPED:
        q->sub = SUB_NONE;
        if (q->w->stopping) break;
        if (q->n > 0) {
            /* A waiter parked while we were leaving: subscribe again (after a
             * drop, on_notify_ready does that). */
            if (event == RD_PUBSUB_UNSUBSCRIBED &&
                rd_redis_subscribe(q->w->notify, q->channel.data, q->channel.len, on_pubsub,
                                   q) == 0)
                q->sub = SUB_PENDING;
        } else if (event == RD_PUBSUB_UNSUBSCRIBED && !q->serving) {
            free_queue(q->w, q);  /* released: nothing refers to q any more */
        } else if (!q->idle) {
            idle_append(q->w, q, uv_now(q->w->loop));  /* the sweep frees it */
        }
        break;
    }
}

static void subscribe(wqueue_t *q)
{
    if (q->sub != SUB_NONE) return;
    if (rd_redis_subscribe(q->w->notify, q->channel.data, q->channel.len, on_pubsub, q) == 0)
        q->sub = SUB_PENDING;
}

/* The notification link is (again) ready: notifications sent while it was
 * down are gone, so subscribe and claim once for every queue with waiters. */
static void on_notify_ready(void *arg)
{
    rd_waiters_t *w = arg;
    for (wqueue_t *q = w->queues; q; q = q->next) {
        if (q->n == 0) continue;
        subscribe(q);
        if (q->sub != SUB_PENDING) serve(q);
    }
}

/* Releases the queues idle for UNSUBSCRIBE_AFTER_IDLE_MS, oldest first, at
 * most RELEASE_BATCH a round: unsubscribes (the queue is freed when Redis
 * confirms) or frees one that holds no subscription. Only idle queues are
 * visited, so a round costs nothing for queues with waiters. */
static void on_sweep(uv_timer_t *t)
{
    rd_waiters_t *w = t->data;
    uint64_t now = uv_now(w->loop);
    size_t done = 0;
    while (w->idle_head && done < RELEASE_BATCH &&
           now - w->idle_head->idle_since_ms >= UNSUBSCRIBE_AFTER_IDLE_MS) {
        wqueue_t *q = w->idle_head;
        done++;
        if (q->serving || q->sub == SUB_PENDING) {
            idle_append(w, q, now);  /* look again once its claim or SUBSCRIBE is answered */
        } else if (q->sub == SUB_ACTIVE) {
            if (rd_redis_unsubscribe(w->notify, q->channel.data, q->channel.len) != 0)
                break;  /* the link is not ready: its drop will clear every subscription */
            q->sub = SUB_LEAVING;
            idle_remove(w, q);
        } else if (q->sub == SUB_LEAVING) {
            idle_remove(w, q);  /* the UNSUBSCRIBE under way frees it */
        } else {
            free_queue(w, q);
        }
    }
    /* 1 ms, not 0: libuv runs a timer due now again in the same pass. */
    if (done == RELEASE_BATCH) uv_timer_start(&w->sweep, on_sweep, 1, SWEEP_EVERY_MS);
}

/* ---------------------------------------------------------------- API */

rd_waiters_t *rd_waiters_new(uv_loop_t *loop, rd_store_t *store,
                             const rd_redis_options_t *link, const char *prefix)
{
    rd_waiters_t *w = rd_calloc(1, sizeof *w);
    w->loop = loop;
    w->store = store;
    w->prefix = rd_strdup(prefix);
    w->nbuckets = MIN_BUCKETS;
    w->buckets = rd_calloc(w->nbuckets, sizeof *w->buckets);
    w->hash = rd_keyed_hash_new();
    if (w->hash == NULL) {
        rd_error("waiters: OpenSSL gives no SipHash or no random key");
        abort();
    }
    rd_redis_options_t opts = *link;
    opts.library = NULL;
    opts.on_ready = on_notify_ready;
    opts.on_ready_arg = w;
    w->notify = rd_redis_start(loop, &opts);
    uv_timer_init(loop, &w->sweep);
    w->sweep.data = w;
    uv_timer_start(&w->sweep, on_sweep, SWEEP_EVERY_MS, SWEEP_EVERY_MS);
    return w;
}

void rd_waiters_park(rd_waiters_t *w, rd_store_queue_t queue, rd_lease_t lease, int count,
                     const char *worker, long long wait_ms, rd_http_exchange_t *ex, rd_store_messages_cb cb, void *arg)
{
    wqueue_t *q = get_queue(w, queue);
    waiter_t *h = rd_calloc(1, sizeof *h);
    h->q = q;
    h->ex = ex;
    h->lease = lease;
    h->count = count;
    h->worker = worker ? rd_strdup(worker) : NULL;
    h->cb = cb;
    h->arg = arg;
    uv_timer_init(w->loop, &h->deadline);
    h->deadline.data = h;
    h->prev = q->tail;
    if (q->tail) q->tail->next = h;
    else q->head = h;
    q->tail = h;
    q->n++;
    idle_remove(w, q);
    w->parked++;
    if (w->stopping) {
        answer_nothing(h);
        return;
    }
    uv_timer_start(&h->deadline, on_deadline, (uint64_t)wait_ms, 0);
    subscribe(q);
    /* With the subscription confirmed (or impossible right now) claim at once;
     * a pending subscription claims when Redis confirms it. */
    if (q->sub != SUB_PENDING) serve(q);
}

void rd_waiters_notify(rd_waiters_t *w, rd_store_queue_t queue)
{
    wqueue_t *q = find_queue(w, queue.name, queue.len);
    if (q && q->n > 0) serve(q);
}

void rd_waiters_poll_if_deaf(rd_waiters_t *w)
{
    if (w == NULL || w->stopping || rd_redis_ready(w->notify)) return;
    for (wqueue_t *q = w->queues; q; q = q->next)
        if (q->n > 0) serve(q);
}

size_t rd_waiters_count(const rd_waiters_t *w)
{
    return w->parked;
}

static void on_notify_closed(void *arg)
{
    rd_waiters_t *w = arg;
    while (w->queues) free_queue(w, w->queues);
    void (*cb)(void *) = w->on_closed;
    void *cb_arg = w->on_closed_arg;
    rd_free(w->buckets);
    rd_keyed_hash_free(w->hash);
    rd_free(w->prefix);
    rd_free(w);
    if (cb) cb(cb_arg);
}

static void on_sweep_closed(uv_handle_t *h)
{
    rd_waiters_t *w = h->data;
    rd_redis_close(w->notify, true, on_notify_closed, w);
}

static void maybe_finish_stop(rd_waiters_t *w)
{
    if (!w->closing || w->claims_in_flight > 0 || uv_is_closing((uv_handle_t *)&w->sweep))
        return;
    uv_close((uv_handle_t *)&w->sweep, on_sweep_closed);
}

void rd_waiters_stop(rd_waiters_t *w)
{
    if (w->stopping) return;
    w->stopping = true;
    for (wqueue_t *q = w->queues; q; q = q->next) {
        waiter_t *next;
        for (waiter_t *h = q->head; h; h = next) {
            next = h->next;
            if (q->serving != h) answer_nothing(h);
        }
    }
}

void rd_waiters_close(rd_waiters_t *w, void (*on_closed)(void *arg), void *arg)
{
    rd_waiters_stop(w);
    w->closing = true;
    w->on_closed = on_closed;
    w->on_closed_arg = arg;
    maybe_finish_stop(w);
}
