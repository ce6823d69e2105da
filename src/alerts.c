/* alerts.c - the alert sender: which queues to read, the events it holds,
 * their POSTs, retries and acknowledgements (docs/dead-letters.md "Alert
 * webhooks"). The stream protocol is in lua/05_alerts.lua; the HTTP client
 * in webhook.c. */
#include "retryd/alerts.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "retryd/alloc.h"
#include "retryd/hash.h"
#include "retryd/jsonw.h"
#include "retryd/log.h"
#include "retryd/message.h"
#include "retryd/webhook.h"

enum {
    QUEUE_BUCKETS = 1024,
    RETRY_CALL_MS = 1000,       /* after a failed Redis call */
    BACKOFF_FIRST_MS = 1000,
    STOP_GRACE_MS = 4000,
    TOUCH_MAX = 1000,           /* alerts_touch's bound (05_alerts.lua) */
};

typedef enum {
    D_WAITING,                  /* to be posted at due_at */
    D_POSTING,
    D_ACKING,
    D_ACK_OWED,                 /* the receiver took it; alerts_ack again at due_at */
} dstate_t;

typedef struct queue {
    struct rd_alerts *a;
    char *name;
    size_t len;
    struct queue *hnext;
    bool active;                /* woken: taken from until a take comes back empty */
    uint64_t poll_at;           /* loop ms of the next take */
    bool taking, touching;
    size_t held;                /* its deliveries */
    uint64_t failures;          /* failed POSTs not yet counted in Redis */
} queue_t;

typedef struct delivery {
    queue_t *q;
    char sid[48];               /* the stream entry id */
    long long id;
    char *body;
    size_t len;
    char *url;                  /* the queue's policy alert_url of its take, or NULL */
    int attempts;
    uint64_t due_at;
    dstate_t state;
    bool lost;                  /* another instance claimed it back */
    struct delivery *prev, *next;
} delivery_t;

struct rd_alerts {
    uv_loop_t *loop;
    rd_store_t *st;
    char *url;
    long long claim_ms, timeout_ms;
    char consumer[128];
    rd_webhook_t *web;
    uv_timer_t pump, touch, grace;
    queue_t *buckets[QUEUE_BUCKETS];
    delivery_t *deliveries;
    size_t held, in_flight, calls;
    uint64_t delivered, failures;
    bool stopping, finishing, failing;
    int closing;                /* handles (and the webhook) still closing */
    void (*on_stopped)(void *arg);
    void *on_stopped_arg;
};

static void kick(rd_alerts_t *a);
static void maybe_finish(rd_alerts_t *a);

/* The URL a delivery goes to: its queue's policy alert_url as alerts_take
 * answered it with the delivery (read in that call, held only with it), else
 * the daemon's --alert-url. */
static const char *alert_url_for(const rd_alerts_t *a, const delivery_t *d)
{
    return d->url ? d->url : a->url;
}

/* ---------------------------------------------------------------- queues */

static queue_t *queue_get(rd_alerts_t *a, const char *name, size_t len)
{
    queue_t **slot = &a->buckets[rd_hash(name, len) % QUEUE_BUCKETS];
    for (queue_t *q = *slot; q; q = q->hnext)
        if (q->len == len && memcmp(q->name, name, len) == 0) return q;
    queue_t *q = rd_calloc(1, sizeof *q);
    q->a = a;
    q->name = rd_strndup(name, len);
    q->len = len;
    q->hnext = *slot;
    *slot = q;
    return q;
}

static void queue_free(queue_t *q)
{
    rd_free(q->name);
    rd_free(q);
}

/* A queue nothing refers to any more leaves the table. */
static void queue_drop_if_idle(queue_t *q)
{
    if (q->active || q->held > 0 || q->taking || q->touching || q->failures > 0) return;
    rd_alerts_t *a = q->a;
    queue_t **p = &a->buckets[rd_hash(q->name, q->len) % QUEUE_BUCKETS];
    while (*p != q) p = &(*p)->hnext;
    *p = q->hnext;
    queue_free(q);
}

/* ---------------------------------------------------------------- Redis */

static rd_store_queue_t queue_of(const queue_t *q)
{
    return (rd_store_queue_t){ .name = q->name, .len = q->len };
}

/* Logs a failed call once per run of failures. */
static void call_failed(rd_alerts_t *a, const char *fn, const rd_store_head_t *head)
{
    if (a->failing) return;
    a->failing = true;
    const char *why = head->status == RD_STORE_ERROR ? "unexpected reply" : "Redis unreachable";
    if (head->status == RD_STORE_ERROR && head->detail.ptr)
        rd_warn("alerts: %s failed (%.*s); trying again", fn, (int)head->detail.len,
                head->detail.ptr);
    else
        rd_warn("alerts: %s failed (%s); trying again", fn, why);
}

/* ---------------------------------------------------------------- deliveries */

static void delivery_drop(rd_alerts_t *a, delivery_t *d)
{
    if (d->prev) d->prev->next = d->next;
    else a->deliveries = d->next;
    if (d->next) d->next->prev = d->prev;
    queue_t *q = d->q;
    q->held--;
    a->held--;
    rd_free(d->body);
    rd_free(d->url);
    rd_free(d);
    queue_drop_if_idle(q);
}

static delivery_t *delivery_find(rd_alerts_t *a, const queue_t *q, const char *sid)
{
    for (delivery_t *d = a->deliveries; d; d = d->next)
        if (d->q == q && strcmp(d->sid, sid) == 0) return d;
    return NULL;
}

/* The JSON event of one death (docs/dead-letters.md "The event"). */
static char *event_body(const queue_t *q, const char *sid, long long id, const char *err,
                        size_t err_len, long long retry_count, long long at_ms, size_t *len)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &b);
    char at[32];
    rd_format_time_ms(at_ms, at);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "event");
    rd_jsonw_string(&w, "dead");
    rd_jsonw_key(&w, "event_id");
    rd_jsonw_string(&w, sid);
    rd_jsonw_key(&w, "queue");
    rd_jsonw_stringn(&w, q->name, q->len);
    rd_jsonw_key(&w, "id");
    rd_jsonw_int(&w, id);
    rd_jsonw_key(&w, "error");
    rd_jsonw_stringn(&w, err, err_len);
    rd_jsonw_key(&w, "retry_count");
    rd_jsonw_int(&w, retry_count);
    rd_jsonw_key(&w, "at");
    rd_jsonw_plain_string(&w, at, strlen(at));
    rd_jsonw_object_close(&w);
    return rd_buf_take(&b, len);
}

/* Holds death e of a take whose queue's alert_url is url ("" when not
 * set), unless it holds that entry already (its own entry, claimed again). */
static void delivery_add(rd_alerts_t *a, queue_t *q, rd_str_t url, const rd_store_alert_t *e)
{
    if (e->stream_id.ptr == NULL || e->stream_id.len >= sizeof ((delivery_t *)0)->sid) return;
    char sidz[sizeof ((delivery_t *)0)->sid];
    memcpy(sidz, e->stream_id.ptr, e->stream_id.len);
    sidz[e->stream_id.len] = '\0';
    if (delivery_find(a, q, sidz)) return;
    /* Without --alert-url, alerts_take takes nothing for a queue without an
     * alert_url; should one come anyway, it stays pending for an instance
     * that has somewhere to send it (claimed back). */
    if ((url.ptr == NULL || url.len == 0) && a->url == NULL) return;
    delivery_t *d = rd_calloc(1, sizeof *d);
    if (url.ptr && url.len > 0) d->url = rd_strndup(url.ptr, url.len);
    memcpy(d->sid, sidz, sizeof d->sid);
    d->q = q;
    d->id = e->id;
    d->body = event_body(q, d->sid, e->id, e->error.ptr ? e->error.ptr : "", e->error.len,
                         e->retry_count, e->at_ms, &d->len);
    d->due_at = uv_now(a->loop);
    d->state = D_WAITING;
    d->next = a->deliveries;
    if (a->deliveries) a->deliveries->prev = d;
    a->deliveries = d;
    q->held++;
    a->held++;
}

static void on_acked(const rd_store_count_t *res, void *arg)
{
    delivery_t *d = arg;
    rd_alerts_t *a = d->q->a;
    a->calls--;
    if (res->head.status == RD_STORE_OK) {
        a->failing = false;
        a->delivered++;
        delivery_drop(a, d);
    } else if (a->stopping) {
        delivery_drop(a, d);  /* stays pending: claimed back, delivered again */
    } else {
        call_failed(a, "alerts_ack", &res->head);
        d->state = D_ACK_OWED;
        d->due_at = uv_now(a->loop) + RETRY_CALL_MS;
    }
    if (a->stopping) maybe_finish(a);
    else kick(a);
}

static void send_ack(rd_alerts_t *a, delivery_t *d)
{
    const char *sids[] = { d->sid };
    d->state = D_ACKING;
    if (rd_store_alerts_ack(a->st, queue_of(d->q), 1, sids, on_acked, d) == 0) {
        a->calls++;
    } else {
        if (a->stopping) {
            delivery_drop(a, d);
            return;
        }
        d->state = D_ACK_OWED;
        d->due_at = uv_now(a->loop) + RETRY_CALL_MS;
    }
}

static void on_posted(const rd_webhook_result_t *res, void *arg)
{
    delivery_t *d = arg;
    queue_t *q = d->q;
    rd_alerts_t *a = q->a;
    a->in_flight--;
    if (res->status >= 200 && res->status < 300) {
        if (d->lost) delivery_drop(a, d);
        else send_ack(a, d);
    } else {
        a->failures++;
        q->failures++;
        d->attempts++;
        uint64_t backoff = RD_ALERTS_BACKOFF_MAX_MS;
        if (d->attempts <= 7) backoff = (uint64_t)BACKOFF_FIRST_MS << (d->attempts - 1);
        if (backoff > RD_ALERTS_BACKOFF_MAX_MS) backoff = RD_ALERTS_BACKOFF_MAX_MS;
        char why[64];
        if (res->error == NULL) snprintf(why, sizeof why, "HTTP %ld", res->status);
        rd_warn("alerts: POST of queue %.*s id %lld to %s failed (%s), attempt %d; "
                "next in %llu ms", (int)q->len, q->name, d->id,
                d->url ? "the queue's alert_url" : "--alert-url", res->error ? res->error : why,
                d->attempts, (unsigned long long)backoff);
        if (d->lost || a->stopping) {
            delivery_drop(a, d);
        } else {
            d->state = D_WAITING;
            d->due_at = uv_now(a->loop) + backoff;
        }
    }
    if (a->stopping) maybe_finish(a);
    else kick(a);
}

static void post(rd_alerts_t *a, delivery_t *d)
{
    d->state = D_POSTING;
    if (rd_webhook_post(a->web, alert_url_for(a, d), d->body, d->len, (long)a->timeout_ms,
                        on_posted, d) != 0) {
        rd_warn("alerts: cannot start a POST to the alert URL; trying again");
        d->state = D_WAITING;
        d->due_at = uv_now(a->loop) + RETRY_CALL_MS;
        return;
    }
    a->in_flight++;
}

/* ---------------------------------------------------------------- taking */

static void on_taken(const rd_store_alerts_taken_t *res, void *arg)
{
    queue_t *q = arg;
    rd_alerts_t *a = q->a;
    a->calls--;
    q->taking = false;
    if (res->head.status != RD_STORE_OK) {
        call_failed(a, "alerts_take", &res->head);
        q->poll_at = uv_now(a->loop) + RETRY_CALL_MS;
    } else {
        a->failing = false;
        for (size_t i = 0; i < res->count && !a->stopping; i++)
            delivery_add(a, q, res->url, &res->alerts[i]);
        if (res->count == 0 && res->more == 0) q->active = false;
        else q->poll_at = uv_now(a->loop);
    }
    if (a->stopping) q->active = false;
    queue_drop_if_idle(q);
    if (a->stopping) maybe_finish(a);
    else kick(a);
}

static void take(rd_alerts_t *a, queue_t *q)
{
    size_t room = RD_ALERTS_HELD_MAX - a->held;
    int count = room < RD_ALERTS_TAKE ? (int)room : RD_ALERTS_TAKE;
    q->taking = true;
    /* Without --alert-url only queues with their own alert_url are taken from. */
    if (rd_store_alerts_take(a->st, queue_of(q), a->consumer, count, a->claim_ms, a->url != NULL,
                             on_taken, q) == 0) {
        a->calls++;
    } else {
        q->taking = false;
        q->poll_at = uv_now(a->loop) + RETRY_CALL_MS;
    }
}

/* ---------------------------------------------------------------- the pump */

static void pump(rd_alerts_t *a);

static void on_pump(uv_timer_t *t)
{
    pump(t->data);
}

/* Runs the pump from the loop, soon (never from inside a callback chain). */
static void kick(rd_alerts_t *a)
{
    if (!a->stopping) uv_timer_start(&a->pump, on_pump, 0, 0);
}

/* Does all work that is due: takes from active queues while there is room,
 * posts due events while under the in-flight bound, acknowledges again what
 * is owed; then sleeps until the next due time. */
static void pump(rd_alerts_t *a)
{
    if (a->stopping) return;
    uint64_t now = uv_now(a->loop), next = UINT64_MAX;
    for (size_t b = 0; b < QUEUE_BUCKETS; b++) {
        for (queue_t *q = a->buckets[b]; q; q = q->hnext) {
            if (!q->active || q->taking) continue;
            if (q->poll_at > now) {
                if (q->poll_at < next) next = q->poll_at;
            } else if (a->held < RD_ALERTS_HELD_MAX) {
                take(a, q);
                if (!q->taking && q->poll_at < next) next = q->poll_at;
            }
        }
    }
    for (delivery_t *d = a->deliveries, *dn; d; d = dn) {
        dn = d->next;
        if (d->state != D_WAITING && d->state != D_ACK_OWED) continue;
        if (d->due_at > now) {
            if (d->due_at < next) next = d->due_at;
        } else if (d->state == D_ACK_OWED) {
            send_ack(a, d);
        } else if (a->in_flight < RD_ALERTS_IN_FLIGHT_MAX) {
            post(a, d);
            if (d->state == D_WAITING && d->due_at < next) next = d->due_at;
        }
    }
    if (next != UINT64_MAX) uv_timer_start(&a->pump, on_pump, next - now, 0);
}

/* ---------------------------------------------------------------- touching */

typedef struct touch_call {
    queue_t *q;
    uint64_t failures;          /* sent: given back if the call fails */
    size_t n;
    char (*sids)[48];           /* the entries it asked to keep */
} touch_call_t;

static bool holds(const rd_store_strings_t *res, const char *sid)
{
    size_t len = strlen(sid);
    for (size_t i = 0; i < res->count; i++) {
        const rd_str_t *s = &res->strings[i];
        if (s->ptr && s->len == len && memcmp(s->ptr, sid, len) == 0) return true;
    }
    return false;
}

static void on_touched(const rd_store_strings_t *res, void *arg)
{
    touch_call_t *t = arg;
    queue_t *q = t->q;
    rd_alerts_t *a = q->a;
    a->calls--;
    q->touching = false;
    if (res->head.status != RD_STORE_OK) {
        call_failed(a, "alerts_touch", &res->head);
        q->failures += t->failures;
    } else {
        a->failing = false;
        /* What it asked to keep and no longer holds was claimed back by
         * another instance (this one was silent too long): that one sends it. */
        for (size_t i = 0; i < t->n; i++) {
            if (holds(res, t->sids[i])) continue;
            delivery_t *d = delivery_find(a, q, t->sids[i]);
            if (d == NULL || d->state == D_ACKING) continue;
            rd_warn("alerts: queue %.*s event %s was claimed back by another instance",
                    (int)q->len, q->name, d->sid);
            if (d->state == D_POSTING) d->lost = true;
            else delivery_drop(a, d);
        }
    }
    rd_free(t->sids);
    rd_free(t);
    queue_drop_if_idle(q);
    if (a->stopping) maybe_finish(a);
    else kick(a);  /* events it dropped made room for more */
}

/* Claims every held entry of q again for this consumer and reports q's
 * failed POSTs: alerts_touch. */
static void touch_queue(rd_alerts_t *a, queue_t *q)
{
    touch_call_t *t = rd_calloc(1, sizeof *t);
    t->q = q;
    t->sids = rd_calloc(q->held ? q->held : 1, sizeof *t->sids);
    for (delivery_t *d = a->deliveries; d && t->n < q->held && t->n < TOUCH_MAX; d = d->next)
        if (d->q == q) memcpy(t->sids[t->n++], d->sid, sizeof d->sid);
    const char **sids = rd_calloc(t->n ? t->n : 1, sizeof *sids);
    for (size_t i = 0; i < t->n; i++) sids[i] = t->sids[i];
    t->failures = q->failures;
    q->touching = true;
    q->failures = 0;
    if (rd_store_alerts_touch(a->st, queue_of(q), a->consumer, (long long)t->failures, t->n, sids,
                              on_touched, t) == 0) {
        a->calls++;
    } else {
        q->touching = false;
        q->failures = t->failures;
        rd_free(t->sids);
        rd_free(t);
    }
    rd_free(sids);
}

static void on_touch_timer(uv_timer_t *timer)
{
    rd_alerts_t *a = timer->data;
    for (size_t b = 0; b < QUEUE_BUCKETS; b++)
        for (queue_t *q = a->buckets[b]; q; q = q->hnext)
            if (!q->touching && (q->held > 0 || q->failures > 0)) touch_queue(a, q);
}

/* ---------------------------------------------------------------- the module */

rd_alerts_t *rd_alerts_start(uv_loop_t *loop, rd_store_t *st,
                             const rd_alerts_options_t *opts)
{
    rd_webhook_t *web = rd_webhook_new(loop);
    if (web == NULL) return NULL;
    rd_alerts_t *a = rd_calloc(1, sizeof *a);
    a->loop = loop;
    a->st = st;
    a->web = web;
    a->url = opts->url ? rd_strdup(opts->url) : NULL;
    a->claim_ms = opts->claim_ms;
    a->timeout_ms = opts->timeout_ms;
    /* Unique per start: a restarted instance never holds its past life's entries. */
    char host[64] = "retryd";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    unsigned char rnd[6] = { 0 };
    uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL);
    snprintf(a->consumer, sizeof a->consumer, "%s/%ld/%02x%02x%02x%02x%02x%02x", host,
             (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    uv_timer_init(loop, &a->pump);
    uv_timer_init(loop, &a->touch);
    uv_timer_init(loop, &a->grace);
    a->pump.data = a->touch.data = a->grace.data = a;
    uint64_t every = (uint64_t)(a->claim_ms / 3 > 0 ? a->claim_ms / 3 : 1);
    uv_timer_start(&a->touch, on_touch_timer, every, every);
    rd_info("alerts: posting deaths to %s as consumer %s of group retryd-alerts",
            a->url ? "the alert URL" : "queues' own alert_url", a->consumer);
    return a;
}

void rd_alerts_wake(rd_alerts_t *a, rd_store_queue_t qn)
{
    if (a == NULL || a->stopping) return;
    queue_t *q = queue_get(a, qn.name, qn.len);
    if (!q->active) {
        q->active = true;
        q->poll_at = uv_now(a->loop);
    }
    kick(a);
}

void rd_alerts_render_metrics(const rd_alerts_t *a, rd_buf_t *out)
{
    rd_buf_printf(out,
                  "# HELP retryd_alert_deliveries_total Alert events this instance delivered "
                  "(2xx) and acknowledged.\n"
                  "# TYPE retryd_alert_deliveries_total counter\n"
                  "retryd_alert_deliveries_total %llu\n"
                  "# HELP retryd_alert_failures_total Alert POSTs that failed (non-2xx, error or "
                  "timeout).\n"
                  "# TYPE retryd_alert_failures_total counter\n"
                  "retryd_alert_failures_total %llu\n"
                  "# HELP retryd_alert_held Alert events this instance holds (posting or waiting "
                  "to retry).\n"
                  "# TYPE retryd_alert_held gauge\n"
                  "retryd_alert_held %zu\n"
                  "# HELP retryd_alert_in_flight Alert POSTs in flight.\n"
                  "# TYPE retryd_alert_in_flight gauge\n"
                  "retryd_alert_in_flight %zu\n",
                  (unsigned long long)a->delivered, (unsigned long long)a->failures, a->held,
                  a->in_flight);
}

/* One of the four things maybe_finish closes (three timers and the client)
 * has closed; the last one frees a. */
static void closed_one(rd_alerts_t *a)
{
    if (--a->closing > 0) return;
    for (size_t b = 0; b < QUEUE_BUCKETS; b++) {
        while (a->buckets[b]) {
            queue_t *q = a->buckets[b];
            a->buckets[b] = q->hnext;
            queue_free(q);
        }
    }
    void (*cb)(void *) = a->on_stopped;
    void *arg = a->on_stopped_arg;
    rd_free(a->url);
    rd_free(a);
    if (cb) cb(arg);
}

static void on_closed(uv_handle_t *h)
{
    closed_one(h->data);
}

static void on_web_closed(void *arg)
{
    closed_one(arg);
}

/* Nothing in flight any more: close the client and the timers. */
static void maybe_finish(rd_alerts_t *a)
{
    if (!a->stopping || a->finishing || a->in_flight > 0 || a->calls > 0) return;
    a->finishing = true;
    while (a->deliveries) delivery_drop(a, a->deliveries);
    a->closing = 4;
    rd_webhook_close(a->web, on_web_closed, a);
    uv_close((uv_handle_t *)&a->pump, on_closed);
    uv_close((uv_handle_t *)&a->touch, on_closed);
    uv_close((uv_handle_t *)&a->grace, on_closed);
}

/* The grace is over: POSTs still in flight are aborted; their entries stay
 * pending and are claimed back by another instance. */
static void on_grace(uv_timer_t *t)
{
    rd_alerts_t *a = t->data;
    if (a->in_flight == 0) return;
    rd_warn("alerts: %zu POSTs still in flight at shutdown; left for another instance",
            a->in_flight);
    rd_webhook_abort(a->web);
    for (delivery_t *d = a->deliveries, *dn; d; d = dn) {
        dn = d->next;
        if (d->state == D_POSTING) delivery_drop(a, d);
    }
    a->in_flight = 0;
    maybe_finish(a);
}

void rd_alerts_stop(rd_alerts_t *a, void (*on_stopped)(void *arg), void *arg)
{
    a->stopping = true;
    a->on_stopped = on_stopped;
    a->on_stopped_arg = arg;
    uv_timer_stop(&a->pump);
    uv_timer_stop(&a->touch);
    for (delivery_t *d = a->deliveries, *dn; d; d = dn) {
        dn = d->next;
        if (d->state == D_WAITING || d->state == D_ACK_OWED) delivery_drop(a, d);
    }
    for (size_t b = 0; b < QUEUE_BUCKETS; b++)
        for (queue_t *q = a->buckets[b], *qn; q; q = qn) {
            qn = q->hnext;
            q->active = false;
            q->failures = 0;
            queue_drop_if_idle(q);
        }
    uv_timer_start(&a->grace, on_grace, STOP_GRACE_MS, 0);
    maybe_finish(a);
}
