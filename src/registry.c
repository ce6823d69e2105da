/* registry.c - the registry cache, the series nudges and the owed
 * registrations: every `register` this process sends (docs/design.md
 * "Timers and the registry"). */
#include "retryd/registry.h"

#include <stdint.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hash.h"
#include "retryd/log.h"

/* Queue names recently registered by this process (or whose registration is
 * in flight), so that enqueue calls `register` only now and then. A name is
 * kept only once `register` answered; entries go stale after a while so that
 * a registry lost with Redis (FLUSHALL, no persistence) is rebuilt. */
enum { REGISTRY_SLOTS = 1024, REGISTRY_FRESH_MS = 10000 };

typedef struct registry_slot {
    char *name;
    size_t len;
    uint64_t at_ms;
} registry_slot_t;

/* Queues this process wrote to and nudged (`register q SERIES_NUDGE_MS`) so
 * the timer ticks them, and samples their time series, about once a minute
 * (docs/series.md). At most one nudge per slot per SERIES_NUDGE_MS: a name
 * that finds its slot taken by another recently nudged one is not nudged
 * (its own ticks and readers still sample it). */
enum { SERIES_SLOTS = 4096, SERIES_NUDGE_MS = 60000 };

/* A `register` that failed, to be sent again (rd_registry_flush_owed). */
enum { OWED_MAX = 4096 };

typedef struct owed {
    char *name;
    size_t len;
    bool timed;                 /* with a timer hint due at due_ms (loop time) */
    uint64_t due_ms;
} owed_t;

struct rd_registry {
    uv_loop_t *loop;
    rd_store_t *st;
    registry_slot_t registry[REGISTRY_SLOTS];
    bool series;                /* --series: writes nudge the timer */
    registry_slot_t nudged[SERIES_SLOTS];  /* queues nudged for a series sample */
    owed_t *owed;
    size_t nowed;
    bool register_failing;      /* logged once per run of failures */
};

/* ---------------------------------------------------------------- registering */

static registry_slot_t *registry_slot(rd_registry_t *reg, const char *name, size_t len)
{
    return &reg->registry[rd_hash(name, len) % REGISTRY_SLOTS];
}

static bool slot_holds(const registry_slot_t *slot, const char *name, size_t len)
{
    return slot->name && slot->len == len && memcmp(slot->name, name, len) == 0;
}

/* Keeps a failed `register` for rd_registry_flush_owed: one entry per name,
 * with the earliest timer hint. Past OWED_MAX names the newest are dropped
 * (the sweep makes their timer work good; docs/design.md). */
static void owe(rd_registry_t *reg, const char *name, size_t len, long long in_ms,
                uint64_t from_ms)
{
    uint64_t due = from_ms + (uint64_t)(in_ms > 0 ? in_ms : 0);
    for (size_t i = 0; i < reg->nowed; i++) {
        owed_t *o = &reg->owed[i];
        if (o->len != len || memcmp(o->name, name, len) != 0) continue;
        if (in_ms >= 0 && (!o->timed || due < o->due_ms)) {
            o->timed = true;
            o->due_ms = due;
        }
        return;
    }
    if (reg->nowed == OWED_MAX) {
        rd_error("store: %d registrations wait to be sent again; dropping %.*s", OWED_MAX,
                 (int)len, name);
        return;
    }
    if (reg->owed == NULL) reg->owed = rd_calloc(OWED_MAX, sizeof *reg->owed);
    reg->owed[reg->nowed++] = (owed_t){ rd_strndup(name, len), len, in_ms >= 0, due };
}

typedef struct registration {
    rd_registry_t *reg;
    char *name;
    size_t len;
    long long in_ms;
    uint64_t sent_ms;
    void (*resume)(void *arg);  /* NULL, or the store's write waiting for this */
    void *resume_arg;
} registration_t;

static void on_register(const rd_store_count_t *res, void *arg)
{
    registration_t *g = arg;
    rd_registry_t *reg = g->reg;
    registry_slot_t *slot = registry_slot(reg, g->name, g->len);
    if (res->head.status == RD_STORE_OK) {
        /* Registered: enqueues may skip `register` for a while. */
        if (!slot_holds(slot, g->name, g->len)) {
            rd_free(slot->name);
            slot->name = rd_strndup(g->name, g->len);
            slot->len = g->len;
        }
        slot->at_ms = uv_now(reg->loop);
        if (reg->register_failing) rd_info("store: registering queues works again");
        reg->register_failing = false;
    } else {
        if (!reg->register_failing) {
            rd_str_t why = res->head.detail;
            if (why.ptr == NULL) {
                why.ptr = res->head.status == RD_STORE_LOST ? "the link dropped" : "not sent";
                why.len = strlen(why.ptr);
            }
            rd_warn("store: registering queue %.*s failed (%.*s); sending it again each tick",
                    (int)g->len, g->name, (int)why.len, why.ptr);
        }
        reg->register_failing = true;
        if (slot_holds(slot, g->name, g->len)) {
            rd_free(slot->name);
            slot->name = NULL;
        }
        /* Owed with a tick due now at the latest: the write it followed may
         * have been answered already, and a DeleteQueue since then would be
         * undone by the registration sent again; that tick finds such a
         * queue empty and removes it again (docs/design.md "A write's
         * registration comes before its answer"). */
        owe(reg, g->name, g->len, g->in_ms >= 0 ? g->in_ms : 0, g->sent_ms);
    }
    void (*resume)(void *) = g->resume;
    void *resume_arg = g->resume_arg;
    rd_free(g->name);
    rd_free(g);
    if (resume) resume(resume_arg);
}

/* `register`: the queue exists; with in_ms >= 0 the timer ticks it within
 * in_ms. A failure is owed (sent again by rd_registry_flush_owed). resume
 * (NULL: none) runs once it has answered; false when it could not be sent
 * (resume never runs). */
static bool send_register_then(rd_registry_t *reg, const char *name, size_t len, long long in_ms,
                               void (*resume)(void *arg), void *resume_arg)
{
    registration_t *g = rd_malloc(sizeof *g);
    g->reg = reg;
    g->name = rd_strndup(name, len);
    g->len = len;
    g->in_ms = in_ms;
    g->sent_ms = uv_now(reg->loop);
    g->resume = resume;
    g->resume_arg = resume_arg;
    rd_store_queue_t q = { .name = name, .len = len };
    if (rd_store_register(reg->st, q, in_ms, on_register, g) != 0) {
        owe(reg, name, len, in_ms, g->sent_ms);
        rd_free(g->name);
        rd_free(g);
        return false;
    }
    return true;
}

static void send_register(rd_registry_t *reg, const char *name, size_t len, long long in_ms)
{
    (void)send_register_then(reg, name, len, in_ms, NULL, NULL);
}

void rd_registry_queue(rd_registry_t *reg, rd_store_queue_t q)
{
    /* Unless this process registered it (or sent the registration)
     * recently. It goes out before the write that asked on the same link,
     * so a queue with messages is registered even if this process dies
     * right after (the registry may name a queue whose enqueue then failed). */
    registry_slot_t *slot = registry_slot(reg, q.name, q.len);
    uint64_t now = uv_now(reg->loop);
    if (slot_holds(slot, q.name, q.len) && now - slot->at_ms < REGISTRY_FRESH_MS) return;
    /* In flight: not registered yet; a failure clears the slot again. */
    rd_free(slot->name);
    slot->name = rd_strndup(q.name, q.len);
    slot->len = q.len;
    slot->at_ms = now;
    send_register(reg, q.name, q.len, -1);
}

/* After a write to q: whether it is due a `register q SERIES_NUDGE_MS`,
 * which it is unless the slot was nudged within SERIES_NUDGE_MS (the slot
 * then counts it as nudged). A write whose own timer hint brings a tick
 * within it needs none. */
static bool series_nudge_due(rd_registry_t *reg, rd_store_queue_t q)
{
    if (!reg->series) return false;
    registry_slot_t *slot = &reg->nudged[rd_hash(q.name, q.len) % SERIES_SLOTS];
    uint64_t now = uv_now(reg->loop);
    bool fresh = slot->name && now - slot->at_ms < SERIES_NUDGE_MS;
    if (fresh) return false;  /* this queue, or another one of the slot, was nudged lately */
    if (!slot_holds(slot, q.name, q.len)) {
        rd_free(slot->name);
        slot->name = rd_strndup(q.name, q.len);
        slot->len = q.len;
    }
    slot->at_ms = now;
    return true;
}

void rd_registry_schedule(rd_registry_t *reg, rd_store_queue_t q, long long in_ms)
{
    send_register(reg, q.name, q.len, in_ms);
}

void rd_registry_flush_owed(rd_registry_t *reg)
{
    if (reg->nowed == 0 || !rd_store_ready(reg->st)) return;
    owed_t *list = reg->owed;
    size_t n = reg->nowed;
    reg->owed = NULL;
    reg->nowed = 0;
    uint64_t now = uv_now(reg->loop);
    for (size_t i = 0; i < n; i++) {
        long long in_ms = -1;
        if (list[i].timed) in_ms = list[i].due_ms > now ? (long long)(list[i].due_ms - now) : 0;
        send_register(reg, list[i].name, list[i].len, in_ms);
        rd_free(list[i].name);
    }
    rd_free(list);
}

/* ---------------------------------------------------------------- the store's hooks */

static void on_before_write(void *arg, rd_store_queue_t q, bool always)
{
    rd_registry_t *reg = arg;
    if (!always) {
        rd_registry_queue(reg, q);
        return;
    }
    /* A policy write: rare, and the queue may have been dropped (and
     * forgotten by the registry) since this process last registered it. */
    registry_slot_t *slot = registry_slot(reg, q.name, q.len);
    rd_free(slot->name);
    slot->name = rd_strndup(q.name, q.len);
    slot->len = q.len;
    slot->at_ms = uv_now(reg->loop);
    send_register(reg, q.name, q.len, -1);
}

/* The hint goes to the schedule before anyone hears of the new work: the
 * store holds the write's callback until this registration has answered
 * (resume). An enqueue that got id 1 may follow a round that found the
 * queue without keys and is removing it from the registry: it registers
 * again whatever this process remembers. And since the callback waits, a
 * DeleteQueue sent after the answer is applied after the registration,
 * which cannot bring the dropped queue back (docs/design.md, "Leaving the
 * registry"). One registration at most: with a hint, or the nudge's. */
static bool on_written(void *arg, rd_store_queue_t q, const rd_store_written_t *w,
                       void (*resume)(void *resume_arg), void *resume_arg)
{
    rd_registry_t *reg = arg;
    if (w->unknown) {
        /* Whatever the call did (a lease, a schedule, a first id) wants the
         * timer, which learns of it only from the hint: owe a registration
         * due now, sent once the link is back. Without it the queue waits
         * for the sweep (up to a full cycle). */
        owe(reg, q.name, q.len, 0, uv_now(reg->loop));
        return false;
    }
    long long in_ms = w->hint_ms;
    bool send = w->first || in_ms >= 0;
    /* A hint within the nudge's minute stands for the nudge. */
    if (w->changed && series_nudge_due(reg, q) && !(in_ms >= 0 && in_ms <= SERIES_NUDGE_MS)) {
        in_ms = SERIES_NUDGE_MS;
        send = true;
    }
    return send && send_register_then(reg, q.name, q.len, in_ms, resume, resume_arg);
}

rd_registry_t *rd_registry_new(uv_loop_t *loop, rd_store_t *st, bool series)
{
    rd_registry_t *reg = rd_calloc(1, sizeof *reg);
    reg->loop = loop;
    reg->st = st;
    reg->series = series;
    rd_store_set_write_hooks(st, on_before_write, on_written, reg);
    return reg;
}

void rd_registry_free(rd_registry_t *reg)
{
    if (reg == NULL) return;
    rd_store_set_write_hooks(reg->st, NULL, NULL, NULL);
    for (size_t i = 0; i < REGISTRY_SLOTS; i++) rd_free(reg->registry[i].name);
    for (size_t i = 0; i < SERIES_SLOTS; i++) rd_free(reg->nudged[i].name);
    for (size_t i = 0; i < reg->nowed; i++) rd_free(reg->owed[i].name);
    rd_free(reg->owed);
    rd_free(reg);
}
