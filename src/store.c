/* store.c - queue operations as FCALLs of the retryd library, and their replies. */
#include "retryd/store.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/backend.h"
#include "retryd/buf.h"
#include "retryd/hash.h"
#include "retryd/keys.h"
#include "retryd/limits.h"
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

/* A `register` that failed, to be sent again (rd_store_flush_owed). */
enum { OWED_MAX = 4096 };

typedef struct owed {
    char *name;
    size_t len;
    bool timed;                 /* with a timer hint due at due_ms (loop time) */
    uint64_t due_ms;
} owed_t;

/* Claims whose answer was lost (the link dropped with the call in flight):
 * their nonces, handed to `release_lost` once the link is back
 * (rd_store_flush_owed; docs/durability.md "A claim whose answer is lost").
 * The library keeps a claim's record LOST_CLAIM_KEEP_MS after it ran (the
 * literal in 20_claim.lua and 35_batch.lua). An entry leaves the list only
 * when a release_lost for it was answered; past LOST_MAX entries the oldest
 * is dropped (its messages' leases run out instead, as before). */
enum { LOST_MAX = 1024, LOST_PER_CALL = 10, NONCE_MAX = 40, LOST_CLAIM_KEEP_MS = 15000 };

typedef struct lost_claim {
    char *queue;                /* owned */
    size_t len;
    char nonce[NONCE_MAX];
} lost_claim_t;

/* One release_lost in flight: what it carried, put back if it fails. */
typedef struct lost_release {
    rd_store_t *st;
    size_t n;
    lost_claim_t claims[LOST_PER_CALL];
} lost_release_t;

/* A hand-back (`release` of what was claimed for a client that is gone,
 * rd_store_hand_back) whose call ended without an answer, or could not be
 * sent: sent again by rd_store_flush_owed until Redis answers it. `release`
 * only takes a message still under the lease it names, so sending it again
 * after one that ran changes nothing. At most HAND_BACK_MAX wait; past that
 * the oldest is dropped (its leases expire instead). */
enum { HAND_BACK_MAX = 1024 };

typedef struct hand_back {
    struct hand_back *next;
    rd_store_t *st;
    char *queue;                /* owned */
    size_t len, n;
    long long ids[RD_CLAIM_COUNT_MAX];
    char *tokens[RD_CLAIM_COUNT_MAX];   /* owned */
    size_t token_lens[RD_CLAIM_COUNT_MAX];
} hand_back_t;

struct rd_store {
    uv_loop_t *loop;
    rd_backend_t *redis;
    char *prefix;
    rd_buf_t registry_key;
    registry_slot_t registry[REGISTRY_SLOTS];
    long long dead_ttl_ms, succeeded_ttl_ms;   /* passed on for timer hints */
    long long alert_recheck_ms;                /* > 0: ticks ask about alerts */
    bool alert_url;                            /* this instance runs with --alert-url */
    bool fleet_alert_url;                      /* timer_take: some instance does */
    owed_t *owed;
    size_t nowed;
    bool register_failing;      /* logged once per run of failures */
    bool series;                /* --series: ticks sample, writes nudge the timer */
    registry_slot_t nudged[SERIES_SLOTS];  /* queues nudged for a series sample */
    char instance[17];          /* random hex: claim nonces are "<instance>.<seq>" */
    unsigned long long nonce_seq;
    lost_claim_t *lost;         /* claims whose answer was lost, oldest first */
    size_t nlost;
    /* Fan-outs (GET /queues, the /metrics snapshot) with stats still to send,
     * served in turn; at most RD_STORE_FANOUT_IN_FLIGHT stats in flight for all
     * of them together. */
    struct fanout *fanout_head, *fanout_tail;
    size_t fanout_in_flight;
    bool fanout_pumping;
    struct snapshot *snapshot;  /* the /metrics snapshot, NULL until first asked */
    hand_back_t *hand_backs, *hand_backs_tail;  /* failed hand-backs, oldest first */
    size_t nhand_backs;
};

/* The shape of a reply, and so which result type and callback it has. */
typedef enum reply_kind {
    KIND_MESSAGES,              /* rd_store_messages_t: {"ok", msg...} or an outcome */
    KIND_ENQUEUED,              /* rd_store_messages_t: {"ok", id, now, timer} or duplicate */
    KIND_HINTED,                /* rd_store_messages_t: {"ok", msg..., timer} or an outcome */
    KIND_CLAIMED,               /* rd_store_messages_t: {"ok", msg..., timer, retry_ms} */
    KIND_POLICY,                /* rd_store_policy_t: {field, value...} or {"ok", ...} */
    KIND_PAUSED,                /* rd_store_policy_t: 1 | 0 */
    KIND_LIST,                  /* rd_store_list_t */
    KIND_HINTED_OUTCOMES,       /* rd_store_outcomes_t: {code..., timer} */
    KIND_SETTLED,               /* rd_store_settled_t: {"ok", {status...}, msg..., timer} */
    KIND_RELEASED,              /* rd_store_released_t */
    KIND_REPLAYED,              /* rd_store_replayed_t */
    KIND_STATS,                 /* rd_store_stats_result_t */
    KIND_TICK,                  /* rd_store_tick_t */
    KIND_SERIES,                /* rd_store_series_t */
    KIND_PAGE,                  /* rd_store_page_t */
    KIND_TAKE,                  /* rd_store_taken_t */
    KIND_DONE,                  /* rd_store_done_t */
    KIND_DELETED,               /* rd_store_head_t: an outcome */
    KIND_PING,                  /* rd_store_head_t: PONG */
    KIND_RAW,                   /* rd_store_raw_t: the reply, for the caller to read */
} reply_kind_t;

/* One result of any kind; every member starts with the head. */
typedef union result {
    rd_store_head_t head;
    rd_store_messages_t messages;
    rd_store_list_t list;
    rd_store_outcomes_t outcomes;
    rd_store_settled_t settled;
    rd_store_released_t released;
    rd_store_replayed_t replayed;
    rd_store_stats_result_t stats;
    rd_store_tick_t tick;
    rd_store_series_t series;
    rd_store_page_t page;
    rd_store_taken_t taken;
    rd_store_done_t done;
    rd_store_policy_t policy;
    rd_store_raw_t raw;
} result_t;

/* The callback of an operation: the member its kind names. */
typedef union callback {
    rd_store_status_cb status;
    rd_store_messages_cb messages;
    rd_store_list_cb list;
    rd_store_outcomes_cb outcomes;
    rd_store_settled_cb settled;
    rd_store_released_cb released;
    rd_store_replayed_cb replayed;
    rd_store_stats_cb stats;
    rd_store_tick_cb tick;
    rd_store_series_cb series;
    rd_store_page_cb page;
    rd_store_taken_cb taken;
    rd_store_done_cb done;
    rd_store_policy_cb policy;
    rd_store_raw_cb raw;
} callback_t;

/* What enqueue sent, to build the new message from {"ok", id, now}. */
typedef struct enqueued {
    char *payload;              /* owned copies */
    size_t payload_len;
    char *idempotency_key;
    int max_retries;
    long long delay_ms;
} enqueued_t;

typedef struct op {
    reply_kind_t kind;
    bool read_only;             /* the command cannot write (see reads_only) */
    callback_t cb;
    void *arg;
    enqueued_t *enq;            /* KIND_ENQUEUED */
    rd_store_t *st;
    char *queue;                /* owned: where a timer hint goes (hinted kinds) */
    size_t queue_len;
    bool nudge;                 /* a write to queue: nudge its series (series_nudge) */
    char what[48];              /* the function (or command) called, for the log */
    char nonce[NONCE_MAX];      /* a claim's nonce ("" for none): lost answer -> lose_claim */
} op_t;

static void hand_back_free(hand_back_t *h)
{
    for (size_t i = 0; i < h->n; i++) rd_free(h->tokens[i]);
    rd_free(h->queue);
    rd_free(h);
}

rd_store_t *rd_store_new(uv_loop_t *loop, rd_backend_t *redis, const char *prefix)
{
    rd_store_t *st = rd_calloc(1, sizeof *st);
    st->loop = loop;
    st->redis = redis;
    st->prefix = rd_strdup(prefix);
    st->series = true;
    rd_keys_registry(&st->registry_key, prefix);
    /* Unique per process start: nonces of two instances (or two runs of one)
     * never meet. */
    unsigned char r[8];
    if (uv_random(NULL, NULL, r, sizeof r, 0, NULL) != 0) {
        uint64_t t = uv_hrtime() ^ ((uint64_t)uv_os_getpid() << 32);
        memcpy(r, &t, sizeof r);
    }
    for (size_t i = 0; i < sizeof r; i++) snprintf(st->instance + 2 * i, 3, "%02x", r[i]);
    return st;
}

static void snapshot_free(rd_store_t *st);

void rd_store_free(rd_store_t *st)
{
    if (st == NULL) return;
    snapshot_free(st);
    for (size_t i = 0; i < REGISTRY_SLOTS; i++) rd_free(st->registry[i].name);
    for (size_t i = 0; i < SERIES_SLOTS; i++) rd_free(st->nudged[i].name);
    for (size_t i = 0; i < st->nowed; i++) rd_free(st->owed[i].name);
    rd_free(st->owed);
    for (size_t i = 0; i < st->nlost; i++) rd_free(st->lost[i].queue);
    rd_free(st->lost);
    while (st->hand_backs) {
        hand_back_t *h = st->hand_backs;
        st->hand_backs = h->next;
        hand_back_free(h);
    }
    rd_buf_free(&st->registry_key);
    rd_free(st->prefix);
    rd_free(st);
}

void rd_store_set_retention(rd_store_t *st, long long dead_ttl_ms, long long succeeded_ttl_ms)
{
    st->dead_ttl_ms = dead_ttl_ms;
    st->succeeded_ttl_ms = succeeded_ttl_ms;
}

void rd_store_set_alerts(rd_store_t *st, long long recheck_ms, bool alert_url)
{
    st->alert_recheck_ms = recheck_ms;
    st->alert_url = alert_url;
}

void rd_store_set_fleet_alert_url(rd_store_t *st, bool on)
{
    st->fleet_alert_url = on;
}

bool rd_store_ready(const rd_store_t *st)
{
    return rd_backend_ready(st->redis);
}

bool rd_store_started(const rd_store_t *st)
{
    return rd_backend_started(st->redis);
}

const rd_histogram_t *rd_store_rtt(const rd_store_t *st)
{
    return rd_backend_rtt(st->redis);
}

/* ---------------------------------------------------------------- replies */

/* The one shape check every parser below makes before it reads an element:
 * r is an array of at least min_len elements. A reply of another shape (from
 * another version of the library, or a hand-loaded one) then fails the parse,
 * which answers RD_STORE_ERROR, never indexes past what is there. */
static bool is_array(const rd_reply_t *r, size_t min_len)
{
    return rd_reply_type(r) == RD_REPLY_ARRAY && rd_reply_len(r) >= min_len;
}

/* The name, value pairs of flat from element `from` on into m. */
static bool parse_fields(const rd_reply_t *flat, size_t from, rd_message_t *m)
{
    size_t n = rd_reply_len(flat);
    if ((n - from) % 2 != 0) return false;
    for (size_t i = from; i < n; i += 2) {
        size_t name_len, value_len;
        const char *name = rd_reply_str(rd_reply_at(flat, i), &name_len);
        const char *value = rd_reply_str(rd_reply_at(flat, i + 1), &value_len);
        if (name == NULL) return false;
        /* "id" comes as an integer reply, every hash value as a string. */
        if (name_len == 2 && memcmp(name, "id", 2) == 0) {
            if (!rd_reply_int(rd_reply_at(flat, i + 1), &m->id)) return false;
            continue;
        }
        if (name_len == 7 && memcmp(name, "history", 7) == 0) {
            /* The one array among the values: kept as it is, for the JSON. */
            m->history = rd_reply_at(flat, i + 1);
            if (rd_reply_type(m->history) != RD_REPLY_ARRAY) return false;
            continue;
        }
        if (value == NULL) return false;
        rd_message_set_field(m, name, name_len, value, value_len);
    }
    return true;
}

/* A message as {"id", id, field, value, ...} (reply_message in the library). */
static bool parse_message(const rd_reply_t *flat, rd_message_t *m)
{
    rd_message_init(m);
    if (!is_array(flat, 2) || !parse_fields(flat, 0, m)) return false;
    /* {"id", id} alone: an idempotent duplicate whose message was deleted. */
    return m->id > 0 && (m->status != RD_STATUS_UNKNOWN || rd_reply_len(flat) == 2);
}

/* A message a claim leased (leased_reply in the library): {id, payload,
 * retry_count, max_retries, created_at, updated_at, lease_expires_at,
 * lease_token} by position, numbers as integers, then optional name, value
 * pairs. */
enum { LEASED_HEAD = 8 };
static bool parse_leased(const rd_reply_t *r, rd_message_t *m)
{
    rd_message_init(m);
    if (!is_array(r, LEASED_HEAD)) return false;
    size_t payload_len, token_len;
    const char *payload = rd_reply_str(rd_reply_at(r, 1), &payload_len);
    const char *token = rd_reply_str(rd_reply_at(r, 7), &token_len);
    long long retry_count, max_retries;
    if (payload == NULL || token == NULL || !rd_reply_int(rd_reply_at(r, 0), &m->id) ||
        !rd_reply_int(rd_reply_at(r, 2), &retry_count) ||
        !rd_reply_int(rd_reply_at(r, 3), &max_retries) ||
        !rd_reply_int(rd_reply_at(r, 4), &m->created_at_ms) ||
        !rd_reply_int(rd_reply_at(r, 5), &m->updated_at_ms) ||
        !rd_reply_int(rd_reply_at(r, 6), &m->lease_expires_at_ms))
        return false;
    m->status = RD_STATUS_PROCESSING;
    m->payload = (rd_str_t){ payload, payload_len };
    m->lease_token = (rd_str_t){ token, token_len };
    m->retry_count = (int)retry_count;
    m->max_retries = (int)max_retries;
    return parse_fields(r, LEASED_HEAD, m) && m->id > 0;
}

/* Parses leased messages from reply elements [from, to) into *out. */
static bool parse_leased_messages(const rd_reply_t *reply, size_t from, size_t to,
                                  rd_message_t **out, size_t *count)
{
    *count = 0;
    if (!is_array(reply, from) || to > rd_reply_len(reply)) return false;
    if (to == from) return true;
    *out = rd_calloc(to - from, sizeof **out);
    for (size_t i = from; i < to; i++) {
        if (!parse_leased(rd_reply_at(reply, i), &(*out)[*count])) return false;
        (*count)++;
    }
    return true;
}

/* Parses messages from reply elements [from, to) into *out (*count of them). */
static bool parse_messages(const rd_reply_t *reply, size_t from, size_t to, rd_message_t **out,
                           size_t *count)
{
    *count = 0;
    if (!is_array(reply, from) || to > rd_reply_len(reply)) return false;
    size_t n = to;
    if (n == from) return true;
    *out = rd_calloc(n - from, sizeof **out);
    for (size_t i = from; i < n; i++) {
        if (!parse_message(rd_reply_at(reply, i), &(*out)[*count])) return false;
        (*count)++;
    }
    return true;
}

static bool parse_outcome(const rd_reply_t *reply, rd_store_head_t *res)
{
    if (!is_array(reply, 1)) return false;
    const rd_reply_t *code = rd_reply_at(reply, 0);
    if (rd_reply_is(code, "ok")) return true;
    if (rd_reply_is(code, "duplicate")) res->status = RD_STORE_DUPLICATE;
    else
    if (rd_reply_is(code, "not_found")) res->status = RD_STORE_NOT_FOUND;
    else if (rd_reply_is(code, "lease_mismatch")) res->status = RD_STORE_LEASE_MISMATCH;
    else if (rd_reply_is(code, "bad_cursor")) res->status = RD_STORE_BAD_CURSOR;
    else if (rd_reply_is(code, "invalid_state")) {
        res->status = RD_STORE_INVALID_STATE;
        res->state.ptr = rd_reply_str(rd_reply_at(reply, 1), &res->state.len);
        if (res->state.ptr == NULL) return false;  /* the state is named in the answer */
    } else {
        return false;
    }
    return true;
}

/* Strings from the elements [from, len) of the array r into a fresh
 * rd_str_t array (*len of them). */
static bool parse_strings_from(const rd_reply_t *r, size_t from, rd_str_t **out, size_t *len)
{
    if (!is_array(r, from)) return false;
    size_t n = rd_reply_len(r) - from;
    *out = rd_calloc(n ? n : 1, sizeof **out);
    *len = n;
    for (size_t i = 0; i < n; i++) {
        (*out)[i].ptr = rd_reply_str(rd_reply_at(r, from + i), &(*out)[i].len);
        if ((*out)[i].ptr == NULL) return false;
    }
    return true;
}

/* A flat array of strings into a fresh rd_str_t array. */
static bool parse_strings(const rd_reply_t *r, rd_str_t **out, size_t *len)
{
    return parse_strings_from(r, 0, out, len);
}

/* settle_claim's {"ok", {status...}, message..., timer}. */
static bool parse_settled(const rd_reply_t *reply, rd_store_settled_t *res, long long *hint)
{
    if (!is_array(reply, 3) || !rd_reply_is(rd_reply_at(reply, 0), "ok")) return false;
    size_t n = rd_reply_len(reply);
    if (!rd_reply_int(rd_reply_at(reply, n - 1), hint)) return false;
    if (!parse_strings(rd_reply_at(reply, 1), &res->outcomes, &res->settled)) return false;
    return parse_leased_messages(reply, 2, n - 1, &res->messages, &res->count);
}

static bool parse_stats(const rd_reply_t *reply, rd_queue_stats_t *st)
{
    if (!is_array(reply, 0)) return false;
    size_t n = rd_reply_len(reply);
    if (n % 2 != 0) return false;
    for (size_t i = 0; i < n; i += 2) {
        size_t len;
        const char *name = rd_reply_str(rd_reply_at(reply, i), &len);
        const rd_reply_t *v = rd_reply_at(reply, i + 1);
        if (name == NULL) return false;
#define NUMBER(field)                                                     \
        if (len == sizeof(#field) - 1 && memcmp(name, #field, len) == 0) { \
            if (!rd_reply_int(v, &st->field)) return false;               \
            continue;                                                     \
        }
        RD_STATS_GAUGES(NUMBER)
#undef NUMBER
        if (len == 6 && memcmp(name, "totals", 6) == 0) {
            if (!parse_strings(v, &st->totals, &st->totals_len)) return false;
        } else if (len == 10 && memcmp(name, "top_errors", 10) == 0) {
            if (!parse_strings(v, &st->top_errors, &st->top_errors_len)) return false;
        }
    }
    return st->totals != NULL && st->top_errors != NULL;
}

/* policy_get's {field, value, ...}, or policy_set's {"ok", field, value, ...}
 * or {"invalid", field, why} (the daemon checks first, so an error). */
static bool parse_policy(const rd_reply_t *reply, rd_store_policy_t *res)
{
    if (!is_array(reply, 0)) return false;
    size_t n = rd_reply_len(reply), from = 0;
    if (n % 2 == 1) {
        if (rd_reply_is(rd_reply_at(reply, 0), "invalid") && n == 3) {
            res->head.status = RD_STORE_ERROR;
            res->head.detail.ptr = rd_reply_str(rd_reply_at(reply, 2), &res->head.detail.len);
            return res->head.detail.ptr != NULL;
        }
        if (!rd_reply_is(rd_reply_at(reply, 0), "ok")) return false;
        from = 1;
    }
    rd_str_t pairs[2 * RD_POLICY_ARGS_MAX];
    if (n - from > sizeof pairs / sizeof pairs[0]) return false;
    for (size_t i = from; i < n; i++) {
        pairs[i - from].ptr = rd_reply_str(rd_reply_at(reply, i), &pairs[i - from].len);
        if (pairs[i - from].ptr == NULL) return false;
    }
    return rd_policy_from_pairs(&res->policy, pairs, n - from);
}

/* {start_ms, step_ms, {enqueued...}, {succeeded...}, {failed...}, {dead...},
 * {replayed...}}, every series as long as the first. */
static bool parse_series(const rd_reply_t *reply, rd_store_series_t *res)
{
    if (!is_array(reply, 2 + RD_SERIES_COUNT) || rd_reply_len(reply) != 2 + RD_SERIES_COUNT ||
        !rd_reply_int(rd_reply_at(reply, 0), &res->start_ms) ||
        !rd_reply_int(rd_reply_at(reply, 1), &res->step_ms))
        return false;
    const rd_reply_t *first = rd_reply_at(reply, 2);
    if (!is_array(first, 1)) return false;
    size_t len = rd_reply_len(first);
    res->values = rd_calloc(RD_SERIES_COUNT * len, sizeof *res->values);
    res->len = len;
    for (size_t i = 0; i < RD_SERIES_COUNT; i++) {
        const rd_reply_t *col = rd_reply_at(reply, 2 + i);
        if (!is_array(col, len) || rd_reply_len(col) != len) return false;
        for (size_t j = 0; j < len; j++)
            if (!rd_reply_int(rd_reply_at(col, j), &res->values[i * len + j])) return false;
    }
    return true;
}

/* {"ok", id, now, timer}: the message is what was sent, as the function
 * stored it; {"ok", id, now, timer, max_retries} when the function chose the
 * retries (the request gave none). */
static bool parse_enqueued(const rd_reply_t *reply, const enqueued_t *e, rd_store_messages_t *res,
                           long long *hint)
{
    if (!parse_outcome(reply, &res->head)) return false;
    if (res->head.status == RD_STORE_DUPLICATE)
        return parse_messages(reply, 1, rd_reply_len(reply), &res->messages, &res->count);
    if (res->head.status != RD_STORE_OK) return false;
    long long id, now;
    long long max_retries = e->max_retries;
    size_t n = rd_reply_len(reply);
    if ((n != 4 && n != 5) || !rd_reply_int(rd_reply_at(reply, 1), &id) ||
        !rd_reply_int(rd_reply_at(reply, 2), &now) ||
        !rd_reply_int(rd_reply_at(reply, 3), hint) ||
        (n == 5 && !rd_reply_int(rd_reply_at(reply, 4), &max_retries)))
        return false;
    res->messages = rd_calloc(1, sizeof *res->messages);
    res->count = 1;
    rd_message_t *m = &res->messages[0];
    rd_message_init(m);
    m->id = id;
    m->status = RD_STATUS_PENDING;
    m->payload = (rd_str_t){ e->payload, e->payload_len };
    m->max_retries = (int)max_retries;
    m->created_at_ms = m->updated_at_ms = now;
    if (e->delay_ms > 0) m->retry_after_ms = now + e->delay_ms;
    if (e->idempotency_key)
        m->idempotency_key = (rd_str_t){ e->idempotency_key, strlen(e->idempotency_key) };
    return true;
}

/* Parses the reply of op into res; *hint is the call's timer hint (-1 none). */
static bool parse_reply(const op_t *op, const rd_reply_t *reply, result_t *res, long long *hint)
{
    switch (op->kind) {
    case KIND_ENQUEUED:
        return parse_enqueued(reply, op->enq, &res->messages, hint);
    case KIND_PING:
        return rd_reply_is(reply, "PONG");
    case KIND_TICK: {
        rd_store_tick_t *t = &res->tick;
        long long empty, alerts = 0;
        size_t n = rd_reply_len(reply);
        if (!((n == 6 || (n == 7 && rd_reply_int(rd_reply_at(reply, 6), &alerts))) &&
              rd_reply_int(rd_reply_at(reply, 0), &t->promoted) &&
              rd_reply_int(rd_reply_at(reply, 1), &t->reclaimed) &&
              rd_reply_int(rd_reply_at(reply, 2), &t->expired) &&
              rd_reply_int(rd_reply_at(reply, 3), &t->next_in_ms) &&
              rd_reply_int(rd_reply_at(reply, 4), &t->ready) &&
              rd_reply_int(rd_reply_at(reply, 5), &empty)))
            return false;
        t->empty = empty == 1;
        t->alerts = alerts == 1 || alerts == 2 ? (int)alerts : 0;
        t->alerts_checked = n == 7;
        return true;
    }
    case KIND_TAKE: {   /* {token, next_in_ms, fleet_alert_url, n, alert name x n, name...} */
        rd_store_taken_t *t = &res->taken;
        long long fleet, n;
        if (!is_array(reply, 4) || !rd_reply_int(rd_reply_at(reply, 0), &t->token) ||
            !rd_reply_int(rd_reply_at(reply, 1), &t->next_in_ms) ||
            !rd_reply_int(rd_reply_at(reply, 2), &fleet) ||
            !rd_reply_int(rd_reply_at(reply, 3), &n) || n < 0 ||
            (size_t)n > rd_reply_len(reply) - 4 ||
            !parse_strings_from(reply, 4, &t->alert_names, &t->count))
            return false;
        t->fleet_alert_url = fleet == 1;
        t->alert_count = (size_t)n;
        t->names = t->alert_names + n;
        t->count -= (size_t)n;
        return true;
    }
    case KIND_PAGE: {   /* {total, next_cursor, name...} */
        rd_store_page_t *p = &res->page;
        if (!is_array(reply, 2) || !rd_reply_int(rd_reply_at(reply, 0), &p->total)) return false;
        p->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 1), &p->next_cursor.len);
        return p->next_cursor.ptr != NULL && parse_strings_from(reply, 2, &p->names, &p->count);
    }
    case KIND_SERIES:
        return parse_series(reply, &res->series);
    case KIND_DONE:
        return rd_reply_int(reply, &res->done.left);
    case KIND_RAW:
        res->raw.reply = reply;
        return true;
    case KIND_HINTED: {
        rd_store_messages_t *m = &res->messages;
        if (!parse_outcome(reply, &m->head)) return false;
        if (m->head.status != RD_STORE_OK) return true;
        size_t n = rd_reply_len(reply);
        return n >= 2 && rd_reply_int(rd_reply_at(reply, n - 1), hint) &&
               parse_messages(reply, 1, n - 1, &m->messages, &m->count);
    }
    case KIND_CLAIMED: {    /* {"ok", msg..., timer[, retry_ms]}: a library without
                               the policy answers no retry_ms */
        rd_store_messages_t *m = &res->messages;
        if (!parse_outcome(reply, &m->head)) return false;
        if (m->head.status != RD_STORE_OK) return true;
        size_t n = rd_reply_len(reply);
        if (n >= 3 && rd_reply_type(rd_reply_at(reply, n - 2)) == RD_REPLY_INTEGER) {
            if (!rd_reply_int(rd_reply_at(reply, n - 1), &m->retry_ms)) return false;
            n--;
        }
        return n >= 2 && rd_reply_int(rd_reply_at(reply, n - 1), hint) &&
               parse_leased_messages(reply, 1, n - 1, &m->messages, &m->count);
    }
    case KIND_POLICY:
        return parse_policy(reply, &res->policy);
    case KIND_PAUSED: {
        long long paused;
        if (!rd_reply_int(reply, &paused)) return false;
        rd_policy_init(&res->policy.policy);
        res->policy.policy.paused = paused == 1;
        return true;
    }
    case KIND_HINTED_OUTCOMES: {    /* {code..., timer} */
        rd_store_outcomes_t *o = &res->outcomes;
        if (!is_array(reply, 1)) return false;
        size_t n = rd_reply_len(reply);
        if (!rd_reply_int(rd_reply_at(reply, n - 1), hint)) return false;
        o->outcomes = rd_calloc(n, sizeof *o->outcomes);
        for (size_t i = 0; i + 1 < n; i++) {
            o->outcomes[i].ptr = rd_reply_str(rd_reply_at(reply, i), &o->outcomes[i].len);
            if (o->outcomes[i].ptr == NULL) return false;
        }
        o->count = n - 1;
        return true;
    }
    case KIND_RELEASED:
        return rd_reply_int(reply, &res->released.released);
    case KIND_STATS:
        return parse_stats(reply, &res->stats.stats);
    case KIND_DELETED:
        return parse_outcome(reply, &res->head);
    case KIND_REPLAYED: {
        rd_store_replayed_t *r = &res->replayed;
        if (!is_array(reply, 1)) return false;
        if (rd_reply_is(rd_reply_at(reply, 0), "bad_cursor")) {
            r->head.status = RD_STORE_BAD_CURSOR;
            return true;
        }
        if (rd_reply_len(reply) != 2 || !rd_reply_int(rd_reply_at(reply, 0), &r->replayed))
            return false;
        r->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 1), &r->next_cursor.len);
        return r->next_cursor.ptr != NULL;
    }
    case KIND_SETTLED:
        return parse_settled(reply, &res->settled, hint);
    case KIND_MESSAGES: {
        rd_store_messages_t *m = &res->messages;
        if (!parse_outcome(reply, &m->head)) return false;
        if (m->head.status != RD_STORE_OK && m->head.status != RD_STORE_DUPLICATE) return true;
        return parse_messages(reply, 1, rd_reply_len(reply), &m->messages, &m->count);
    }
    case KIND_LIST: {
        rd_store_list_t *l = &res->list;
        if (!parse_outcome(reply, &l->head)) return false;
        if (l->head.status != RD_STORE_OK) return true;
        if (!is_array(reply, 3) || !rd_reply_int(rd_reply_at(reply, 1), &l->total))
            return false;
        l->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 2), &l->next_cursor.len);
        return l->next_cursor.ptr != NULL &&
               parse_messages(reply, 3, rd_reply_len(reply), &l->messages, &l->count);
    }
    }
    return false;
}

static void free_op(op_t *op)
{
    rd_free(op->queue);
    if (op->enq) {
        rd_free(op->enq->payload);
        rd_free(op->enq->idempotency_key);
        rd_free(op->enq);
    }
    rd_free(op);
}

static void free_result(reply_kind_t kind, result_t *res)
{
    switch (kind) {
    case KIND_MESSAGES:
    case KIND_ENQUEUED:
    case KIND_HINTED:
    case KIND_CLAIMED:
        rd_free(res->messages.messages);
        break;
    case KIND_LIST:
        rd_free(res->list.messages);
        break;
    case KIND_HINTED_OUTCOMES:
        rd_free(res->outcomes.outcomes);
        break;
    case KIND_SETTLED:
        rd_free(res->settled.outcomes);
        rd_free(res->settled.messages);
        break;
    case KIND_STATS:
        rd_free(res->stats.stats.totals);
        rd_free(res->stats.stats.top_errors);
        break;
    case KIND_SERIES:
        rd_free(res->series.values);
        break;
    case KIND_PAGE:
        rd_free(res->page.names);
        break;
    case KIND_TAKE:
        rd_free(res->taken.alert_names);  /* names point into it */
        break;
    case KIND_POLICY:
    case KIND_PAUSED:
    case KIND_RELEASED:
    case KIND_REPLAYED:
    case KIND_TICK:
    case KIND_DONE:
    case KIND_DELETED:
    case KIND_PING:
    case KIND_RAW:
        break;
    }
}

/* Runs op's callback with res as its kind's result type. */
static void deliver(const op_t *op, const result_t *res)
{
    switch (op->kind) {
    case KIND_MESSAGES:
    case KIND_ENQUEUED:
    case KIND_HINTED:
    case KIND_CLAIMED:
        op->cb.messages(&res->messages, op->arg);
        return;
    case KIND_POLICY:
    case KIND_PAUSED:
        op->cb.policy(&res->policy, op->arg);
        return;
    case KIND_LIST: op->cb.list(&res->list, op->arg); return;
    case KIND_HINTED_OUTCOMES: op->cb.outcomes(&res->outcomes, op->arg); return;
    case KIND_SETTLED: op->cb.settled(&res->settled, op->arg); return;
    case KIND_RELEASED: op->cb.released(&res->released, op->arg); return;
    case KIND_REPLAYED: op->cb.replayed(&res->replayed, op->arg); return;
    case KIND_STATS: op->cb.stats(&res->stats, op->arg); return;
    case KIND_TICK: op->cb.tick(&res->tick, op->arg); return;
    case KIND_SERIES: op->cb.series(&res->series, op->arg); return;
    case KIND_PAGE: op->cb.page(&res->page, op->arg); return;
    case KIND_TAKE: op->cb.taken(&res->taken, op->arg); return;
    case KIND_DONE: op->cb.done(&res->done, op->arg); return;
    case KIND_RAW: op->cb.raw(&res->raw, op->arg); return;
    case KIND_DELETED:
    case KIND_PING:
        op->cb.status(&res->head, op->arg);
        return;
    }
}

static void send_register(rd_store_t *st, const char *name, size_t len, long long in_ms);
static void series_nudge(rd_store_t *st, const op_t *op, bool hinted);
static void lose_claim(rd_store_t *st, const char *queue, size_t len, const char *nonce);
static void flush_hand_backs(rd_store_t *st);
static void owe(rd_store_t *st, const char *name, size_t len, long long in_ms, uint64_t from_ms);

/* "integer 7", "array of 0", "string \"ok\"": what came, for the log. */
static void describe_reply(const rd_reply_t *r, char *out, size_t cap)
{
    long long v;
    size_t len;
    const char *str = rd_reply_str(r, &len);
    switch (rd_reply_type(r)) {
    case RD_REPLY_INTEGER:
        rd_reply_int(r, &v);
        snprintf(out, cap, "integer %lld", v);
        return;
    case RD_REPLY_ARRAY:
        snprintf(out, cap, "array of %zu", rd_reply_len(r));
        return;
    case RD_REPLY_NIL:
        snprintf(out, cap, "nil");
        return;
    default:
        break;
    }
    char shown[41];
    size_t n = len < sizeof shown - 1 ? len : sizeof shown - 1;
    for (size_t i = 0; i < n; i++)
        shown[i] = str[i] >= 0x20 && str[i] < 0x7f && str[i] != '"' ? str[i] : '?';
    shown[n] = '\0';
    snprintf(out, cap, "%s \"%s\"%s", rd_reply_type(r) == RD_REPLY_STATUS ? "status" : "string",
             shown, len > n ? "..." : "");
}

/* Whether a claim or settle-and-claim that answered OK changed nothing: no
 * message leased and no settlement applied (each not_found, invalid_state or
 * lease_mismatch). The library wrote no key for it, so it must not nudge
 * the queue into the registry either: a claim on a name that never had a
 * message leaves no trace (README "Claim order"; docs/design.md "Claims that
 * find nothing"). */
static bool claimed_nothing(reply_kind_t kind, const result_t *res)
{
    if (kind == KIND_CLAIMED) return res->messages.count == 0;
    if (kind != KIND_SETTLED || res->settled.count > 0) return false;
    for (size_t i = 0; i < res->settled.settled; i++) {
        const rd_str_t *o = &res->settled.outcomes[i];
        bool applied = (o->len == 9 && memcmp(o->ptr, "succeeded", 9) == 0) ||
                       (o->len == 7 && memcmp(o->ptr, "pending", 7) == 0) ||
                       (o->len == 4 && memcmp(o->ptr, "dead", 4) == 0);
        if (applied) return false;
    }
    return true;
}

static void on_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    op_t *op = arg;
    result_t res;
    memset(&res, 0, sizeof res);
    long long hint = -1;
    bool hint_unknown = false;  /* the call may have written, its hint is not known */
    char detail[160];
    if (status == RD_REDIS_LOST) {
        hint_unknown = !op->read_only;
        /* A read has no outcome to be unsure of: it simply was not done. */
        res.head.status = op->read_only ? RD_STORE_UNAVAILABLE : RD_STORE_LOST;
    } else if (status == RD_REDIS_NOT_SENT) {
        res.head.status = RD_STORE_UNAVAILABLE;
    } else if (rd_reply_type(reply) == RD_REPLY_ERROR) {
        res.head.status = RD_STORE_ERROR;
        res.head.detail.ptr = rd_reply_str(reply, &res.head.detail.len);
    } else if (!parse_reply(op, reply, &res, &hint)) {
        char got[64];
        describe_reply(reply, got, sizeof got);
        free_result(op->kind, &res);
        memset(&res, 0, sizeof res);
        res.head.status = RD_STORE_ERROR;
        snprintf(detail, sizeof detail, "unexpected reply to %s: %s", op->what, got);
        rd_error("store: %s (another version of the library?)", detail);
        res.head.detail.ptr = detail;
        res.head.detail.len = strlen(detail);
        hint = -1;
        hint_unknown = true;
    }
    /* The hint goes to the schedule before anyone hears of the new work. An
     * enqueue that got id 1 may follow a round that found the queue without
     * keys and is removing it from the registry: it registers again
     * whatever this process remembers (docs/design.md, "Leaving the
     * registry"). */
    if (op->queue && res.head.status == RD_STORE_OK) {
        bool first = op->kind == KIND_ENQUEUED && res.messages.count == 1 &&
                     res.messages.messages[0].id == 1;
        /* A hint within the nudge's minute stands for the nudge. */
        if (op->nudge && !claimed_nothing(op->kind, &res))
            series_nudge(op->st, op, hint >= 0 && hint <= SERIES_NUDGE_MS);
        if (first || hint >= 0) send_register(op->st, op->queue, op->queue_len, hint);
    } else if (op->queue && hint_unknown) {
        /* Whatever the call did (a lease, a schedule, a first id) wants the
         * timer, which learns of it only from the hint: owe a registration
         * due now, sent once the link is back. Without it the queue waits
         * for the sweep (up to a full cycle). */
        owe(op->st, op->queue, op->queue_len, 0, uv_now(op->st->loop));
    }
    /* A claim that may have leased messages for a client that will never
     * hear of them: hand them back once the link is back. */
    if (status == RD_REDIS_LOST && op->nonce[0] && op->queue)
        lose_claim(op->st, op->queue, op->queue_len, op->nonce);
    deliver(op, &res);
    free_result(op->kind, &res);
    free_op(op);
}

/* ---------------------------------------------------------------- calls */

/* FCALL name numkeys base (4), then at most RD_ACK_BATCH_MAX (id, token)
 * pairs, a mode and RD_STORE_REPLAY_IDS_MAX ids, or the longest call,
 * settle_claim's: lease, count and n (3), 6 per settlement, then dead_ttl,
 * succeeded_ttl, the lease's origin, worker and the claim's nonce (5). */
enum { SETTLE_CLAIM_MAX_ARGS = 4 + 3 + 6 * RD_SETTLE_BATCH_MAX + 5,
       MAX_ARGS = SETTLE_CLAIM_MAX_ARGS };
_Static_assert(2 * RD_ACK_BATCH_MAX <= 6 * RD_SETTLE_BATCH_MAX &&
               RD_STORE_REPLAY_IDS_MAX <= 6 * RD_SETTLE_BATCH_MAX, "every call fits MAX_ARGS");
_Static_assert(5 + 3 * RD_STORE_REPORTS_MAX <= MAX_ARGS, "timer_done's reports fit a call");

typedef struct call {
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char numbers[MAX_ARGS][24];     /* storage for formatted integers */
    char fn[48];                    /* the versioned function name */
    char nonce[NONCE_MAX];          /* a claim's nonce (arg_nonce), "" for none */
    rd_buf_t base, mkey;
} call_t;

/* Not a memset: the argument arrays are large and filled as they are used. */
static void call_init(call_t *c)
{
    c->argc = 0;
    c->nonce[0] = '\0';
    c->base = (rd_buf_t)RD_BUF_INIT;
    c->mkey = (rd_buf_t)RD_BUF_INIT;
}

static void arg_bytes(call_t *c, const char *s, size_t len)
{
    assert(c->argc < MAX_ARGS);
    c->argv[c->argc] = s;
    c->lens[c->argc] = len;
    c->argc++;
}

static void arg_str(call_t *c, const char *s)
{
    arg_bytes(c, s, strlen(s));
}

static void arg_int(call_t *c, long long v)
{
    int n = snprintf(c->numbers[c->argc], sizeof c->numbers[0], "%lld", v);
    arg_bytes(c, c->numbers[c->argc], (size_t)n);
}

/* A claim's nonce, "<instance>.<seq>": unique per call, so release_lost can
 * find what this call leased if its answer is lost. */
static void arg_nonce(call_t *c, rd_store_t *st)
{
    int n = snprintf(c->nonce, sizeof c->nonce, "%s.%llx", st->instance, ++st->nonce_seq);
    assert(n > 0 && (size_t)n < sizeof c->nonce);
    arg_bytes(c, c->nonce, (size_t)n);
}

/* FCALL <library>_fn numkeys base [mkey]: id > 0 adds the message key. Every
 * call goes through here, so the library's version is added in one place. */
static void begin_fcall(call_t *c, rd_store_t *st, const char *fn, rd_store_queue_t q,
                        long long id)
{
    call_init(c);
    rd_keys_queue_base(&c->base, st->prefix, q.name, q.len);
    arg_str(c, "FCALL");
    int n = snprintf(c->fn, sizeof c->fn, "%s", RD_FUNCTION(""));
    assert(n > 0 && strlen(fn) < sizeof c->fn - (size_t)n);
    memcpy(c->fn + n, fn, strlen(fn) + 1);
    arg_str(c, c->fn);
    arg_str(c, id > 0 ? "2" : "1");
    arg_bytes(c, c->base.data, c->base.len);
    if (id > 0) {
        rd_keys_message(&c->mkey, c->base.data, c->base.len, id);
        arg_bytes(c, c->mkey.data, c->mkey.len);
    }
}

/* Whether a command only reads, decided here once for every operation by
 * its verb: FCALL_RO (the library's no-writes functions; Redis refuses a
 * write inside one) and the plain reads the store sends. Anything else may
 * write. */
static bool reads_only(const call_t *c)
{
    static const char *const reads[] = { "FCALL_RO", "SMEMBERS", "PING" };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++)
        if (c->lens[0] == strlen(reads[i]) && memcmp(c->argv[0], reads[i], c->lens[0]) == 0)
            return true;
    /* `series` writes only its sample, which any later call takes again:
     * no outcome a caller could be unsure of. */
    static const char series[] = RD_FUNCTION("series");
    return c->argc > 1 && c->lens[1] == sizeof series - 1 &&
           memcmp(c->argv[1], series, sizeof series - 1) == 0;
}

/* Takes ownership of enq (NULL for every kind but KIND_ENQUEUED); hint_q (or
 * NULL) is the queue a timer hint in the reply goes to (copied). */
static int send_call_with(rd_store_t *st, call_t *c, reply_kind_t kind, enqueued_t *enq,
                          const rd_store_queue_t *hint_q, callback_t cb, void *arg)
{
    op_t *op = rd_malloc(sizeof *op);
    op->kind = kind;
    op->read_only = reads_only(c);
    op->cb = cb;
    op->arg = arg;
    op->enq = enq;
    op->st = st;
    op->queue = hint_q ? rd_strndup(hint_q->name, hint_q->len) : NULL;
    op->queue_len = hint_q ? hint_q->len : 0;
    op->nudge = hint_q != NULL && !op->read_only;
    memcpy(op->nonce, c->nonce, sizeof op->nonce);
    /* FCALL/FCALL_RO name the function second; other commands are their own name. */
    int named = c->argc > 1 && strncmp(c->argv[0], "FCALL", 5) == 0 ? 1 : 0;
    snprintf(op->what, sizeof op->what, "%.*s", (int)c->lens[named], c->argv[named]);
    int rc = rd_backend_command(st->redis, c->argc, c->argv, c->lens, on_reply, op);
    if (rc != 0) free_op(op);
    rd_buf_free(&c->base);
    rd_buf_free(&c->mkey);
    return rc;
}

static int send_call(rd_store_t *st, call_t *c, reply_kind_t kind, callback_t cb, void *arg)
{
    return send_call_with(st, c, kind, NULL, NULL, cb, arg);
}

/* A call whose reply may carry a timer hint for q. */
static int send_hinted(rd_store_t *st, call_t *c, reply_kind_t kind, rd_store_queue_t q,
                       callback_t cb, void *arg)
{
    return send_call_with(st, c, kind, NULL, &q, cb, arg);
}

/* ---------------------------------------------------------------- registry */

static registry_slot_t *registry_slot(rd_store_t *st, const char *name, size_t len)
{
    return &st->registry[rd_hash(name, len) % REGISTRY_SLOTS];
}

static bool slot_holds(const registry_slot_t *slot, const char *name, size_t len)
{
    return slot->name && slot->len == len && memcmp(slot->name, name, len) == 0;
}

/* Keeps a failed `register` for rd_store_flush_owed: one entry per name, with
 * the earliest timer hint. Past OWED_MAX names the newest are dropped (the
 * sweep makes their timer work good; docs/design.md). */
static void owe(rd_store_t *st, const char *name, size_t len, long long in_ms, uint64_t from_ms)
{
    uint64_t due = from_ms + (uint64_t)(in_ms > 0 ? in_ms : 0);
    for (size_t i = 0; i < st->nowed; i++) {
        owed_t *o = &st->owed[i];
        if (o->len != len || memcmp(o->name, name, len) != 0) continue;
        if (in_ms >= 0 && (!o->timed || due < o->due_ms)) {
            o->timed = true;
            o->due_ms = due;
        }
        return;
    }
    if (st->nowed == OWED_MAX) {
        rd_error("store: %d registrations wait to be sent again; dropping %.*s", OWED_MAX,
                 (int)len, name);
        return;
    }
    if (st->owed == NULL) st->owed = rd_calloc(OWED_MAX, sizeof *st->owed);
    st->owed[st->nowed++] = (owed_t){ rd_strndup(name, len), len, in_ms >= 0, due };
}

typedef struct registration {
    rd_store_t *st;
    char *name;
    size_t len;
    long long in_ms;
    uint64_t sent_ms;
} registration_t;

static void on_register(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    registration_t *g = arg;
    rd_store_t *st = g->st;
    registry_slot_t *slot = registry_slot(st, g->name, g->len);
    if (status == RD_REDIS_OK && rd_reply_type(reply) == RD_REPLY_INTEGER) {
        /* Registered: enqueues may skip `register` for a while. */
        if (!slot_holds(slot, g->name, g->len)) {
            rd_free(slot->name);
            slot->name = rd_strndup(g->name, g->len);
            slot->len = g->len;
        }
        slot->at_ms = uv_now(st->loop);
        if (st->register_failing) rd_info("store: registering queues works again");
        st->register_failing = false;
    } else {
        if (!st->register_failing) {
            size_t len = 0;
            const char *why = status == RD_REDIS_OK ? rd_reply_str(reply, &len) : NULL;
            if (why == NULL) {
                why = status == RD_REDIS_LOST ? "the link dropped" : "not sent";
                len = strlen(why);
            }
            rd_warn("store: registering queue %.*s failed (%.*s); sending it again each tick",
                    (int)g->len, g->name, (int)len, why);
        }
        st->register_failing = true;
        if (slot_holds(slot, g->name, g->len)) {
            rd_free(slot->name);
            slot->name = NULL;
        }
        owe(st, g->name, g->len, g->in_ms, g->sent_ms);
    }
    rd_free(g->name);
    rd_free(g);
}

/* FCALL register: the queue exists; with in_ms >= 0 the timer ticks it
 * within in_ms. A failure is owed (sent again by rd_store_flush_owed). */
static void send_register(rd_store_t *st, const char *name, size_t len, long long in_ms)
{
    registration_t *g = rd_malloc(sizeof *g);
    g->st = st;
    g->name = rd_strndup(name, len);
    g->len = len;
    g->in_ms = in_ms;
    g->sent_ms = uv_now(st->loop);
    char ms[24];
    int n = snprintf(ms, sizeof ms, "%lld", in_ms < 0 ? -1LL : in_ms);
    const char *argv[] = { "FCALL", RD_FUNCTION("register"), "1", st->registry_key.data, name, ms };
    size_t lens[] = { 5, strlen(argv[1]), 1, st->registry_key.len, len, (size_t)n };
    if (rd_backend_command(st->redis, 6, argv, lens, on_register, g) != 0) {
        owe(st, name, len, in_ms, g->sent_ms);
        rd_free(g->name);
        rd_free(g);
    }
}

/* Registers q before an enqueue unless this process registered it (or sent
 * the registration) recently. It goes out before the enqueue on the same
 * link, so a queue with messages is registered even if this process dies
 * right after (the registry may name a queue whose enqueue then failed). */
static void register_queue(rd_store_t *st, rd_store_queue_t q)
{
    registry_slot_t *slot = registry_slot(st, q.name, q.len);
    uint64_t now = uv_now(st->loop);
    if (slot_holds(slot, q.name, q.len) && now - slot->at_ms < REGISTRY_FRESH_MS) return;
    /* In flight: not registered yet; a failure clears the slot again. */
    rd_free(slot->name);
    slot->name = rd_strndup(q.name, q.len);
    slot->len = q.len;
    slot->at_ms = now;
    send_register(st, q.name, q.len, -1);
}

/* After a write to op's queue: `register q SERIES_NUDGE_MS` unless the slot
 * was nudged within SERIES_NUDGE_MS, or the write's own timer hint (hinted)
 * already brings a tick within it. */
static void series_nudge(rd_store_t *st, const op_t *op, bool hinted)
{
    if (!st->series) return;
    registry_slot_t *slot = &st->nudged[rd_hash(op->queue, op->queue_len) % SERIES_SLOTS];
    uint64_t now = uv_now(st->loop);
    bool fresh = slot->name && now - slot->at_ms < SERIES_NUDGE_MS;
    if (fresh) return;  /* this queue, or another one of the slot, was nudged lately */
    if (!slot_holds(slot, op->queue, op->queue_len)) {
        rd_free(slot->name);
        slot->name = rd_strndup(op->queue, op->queue_len);
        slot->len = op->queue_len;
    }
    slot->at_ms = now;
    if (!hinted) send_register(st, op->queue, op->queue_len, SERIES_NUDGE_MS);
}

void rd_store_set_series(rd_store_t *st, bool on)
{
    st->series = on;
}

void rd_store_schedule(rd_store_t *st, rd_store_queue_t q, long long in_ms)
{
    send_register(st, q.name, q.len, in_ms);
}

/* Keeps a claim whose answer was lost for rd_store_flush_owed. */
static void lose_claim(rd_store_t *st, const char *queue, size_t len, const char *nonce)
{
    if (st->nlost == LOST_MAX) {
        rd_warn("store: more than %d claims with a lost answer wait to be handed back; the "
                "oldest (queue \"%.*s\") is dropped: its leases will expire instead", LOST_MAX,
                (int)st->lost[0].len, st->lost[0].queue);
        rd_free(st->lost[0].queue);
        memmove(st->lost, st->lost + 1, (st->nlost - 1) * sizeof *st->lost);
        st->nlost--;
    }
    if (st->lost == NULL) st->lost = rd_malloc(LOST_MAX * sizeof *st->lost);
    lost_claim_t *l = &st->lost[st->nlost++];
    l->queue = rd_strndup(queue, len);
    l->len = len;
    snprintf(l->nonce, sizeof l->nonce, "%s", nonce);
}

static void on_lost_released(const rd_store_released_t *res, void *arg)
{
    lost_release_t *b = arg;
    if (res->head.status == RD_STORE_OK) {
        if (res->released > 0)
            rd_warn("store: %lld message(s) of queue \"%.*s\" leased by %zu claim(s) whose "
                    "answer was lost were handed back", res->released, (int)b->claims[0].len,
                    b->claims[0].queue, b->n);
        for (size_t i = 0; i < b->n; i++) rd_free(b->claims[i].queue);
    } else if (res->head.status == RD_STORE_ERROR) {
        /* Redis answered with an error: asking again would not help. */
        rd_warn("store: handing back what %zu claim(s) with a lost answer leased in queue "
                "\"%.*s\" failed (%.*s); their leases will expire instead", b->n,
                (int)b->claims[0].len, b->claims[0].queue, (int)res->head.detail.len,
                res->head.detail.ptr ? res->head.detail.ptr : "");
        for (size_t i = 0; i < b->n; i++) rd_free(b->claims[i].queue);
    } else {
        /* Not done (the link dropped again, or is down): try again next
         * round. */
        for (size_t i = 0; i < b->n; i++) {
            lose_claim(b->st, b->claims[i].queue, b->claims[i].len, b->claims[i].nonce);
            rd_free(b->claims[i].queue);
        }
    }
    rd_free(b);
}

/* Sends release_lost for the lost claims of one queue (up to LOST_PER_CALL,
 * the oldest first): they leave the list while the call is out. */
static void flush_lost(rd_store_t *st)
{
    while (st->nlost > 0 && rd_backend_ready(st->redis)) {
        lost_release_t *b = rd_malloc(sizeof *b);
        b->st = st;
        b->n = 0;
        size_t kept = 0;
        const lost_claim_t *first = &st->lost[0];
        char *queue = first->queue;
        size_t len = first->len;
        for (size_t i = 0; i < st->nlost; i++) {
            lost_claim_t *l = &st->lost[i];
            if (b->n < LOST_PER_CALL && l->len == len && memcmp(l->queue, queue, len) == 0)
                b->claims[b->n++] = *l;
            else
                st->lost[kept++] = *l;
        }
        st->nlost = kept;
        call_t *c = rd_malloc(sizeof *c);
        rd_store_queue_t q = { b->claims[0].queue, b->claims[0].len };
        begin_fcall(c, st, "release_lost", q, 0);
        for (size_t i = 0; i < b->n; i++) arg_str(c, b->claims[i].nonce);
        int rc = send_call(st, c, KIND_RELEASED, (callback_t){ .released = on_lost_released }, b);
        rd_free(c);
        if (rc != 0) {
            rd_store_released_t failed = { .head = { .status = RD_STORE_UNAVAILABLE } };
            on_lost_released(&failed, b);
            return;
        }
    }
}

void rd_store_flush_owed(rd_store_t *st)
{
    flush_lost(st);
    flush_hand_backs(st);
    if (st->nowed == 0 || !rd_backend_ready(st->redis)) return;
    owed_t *list = st->owed;
    size_t n = st->nowed;
    st->owed = NULL;
    st->nowed = 0;
    uint64_t now = uv_now(st->loop);
    for (size_t i = 0; i < n; i++) {
        long long in_ms = -1;
        if (list[i].timed) in_ms = list[i].due_ms > now ? (long long)(list[i].due_ms - now) : 0;
        send_register(st, list[i].name, list[i].len, in_ms);
        rd_free(list[i].name);
    }
    rd_free(list);
}

/* ---------------------------------------------------------------- queue calls */

int rd_store_enqueue(rd_store_t *st, rd_store_queue_t q, const char *payload, size_t len,
                     int max_retries, long long delay_ms, const char *idempotency_key,
                     rd_store_messages_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);
    call_t c;
    begin_fcall(&c, st, "enqueue", q, 0);
    arg_bytes(&c, payload, len);
    arg_int(&c, max_retries > 0 ? max_retries : RD_MAX_RETRIES_DEFAULT);
    arg_int(&c, delay_ms);
    arg_str(&c, idempotency_key ? idempotency_key : "");
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, max_retries > 0 ? "request" : "default");
    enqueued_t *e = rd_malloc(sizeof *e);
    e->payload = rd_strndup(payload, len);
    e->payload_len = len;
    e->idempotency_key = idempotency_key ? rd_strdup(idempotency_key) : NULL;
    e->max_retries = max_retries;
    e->delay_ms = delay_ms;
    return send_call_with(st, &c, KIND_ENQUEUED, e, &q, (callback_t){ .messages = cb }, arg);
}

int rd_store_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                   const char *worker, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "claim", q, 0);
    arg_int(&c, lease_ms < 0 ? -lease_ms : lease_ms);
    arg_int(&c, count);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease_ms < 0 ? "flag" : "request");
    arg_str(&c, worker ? worker : "");
    arg_nonce(&c, st);
    return send_hinted(st, &c, KIND_CLAIMED, q, (callback_t){ .messages = cb }, arg);
}

int rd_store_succeed(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                     rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "succeed", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, st->succeeded_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, (callback_t){ .messages = cb }, arg);
}

/* A failure's error as sent: at most RD_LAST_ERROR_MAX bytes, cut before a
 * UTF-8 sequence as the library would cut it, so Redis never reads the rest
 * (a 1 MiB argument alone costs it about a millisecond). */
static void arg_error(call_t *c, const char *error)
{
    size_t len = strlen(error);
    if (len > RD_LAST_ERROR_MAX) {
        len = RD_LAST_ERROR_MAX;
        while (len > 0 && ((unsigned char)error[len] & 0xC0) == 0x80) len--;
    }
    arg_bytes(c, error, len);
}

int rd_store_fail(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                  const char *error, bool retryable, long long retry_after_ms,
                  rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "fail", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_error(&c, error);
    arg_str(&c, retryable ? "1" : "0");
    arg_int(&c, retry_after_ms < 0 ? -1 : retry_after_ms);
    arg_int(&c, st->dead_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, (callback_t){ .messages = cb }, arg);
}

int rd_store_extend(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    long long lease_ms, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "extend", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, lease_ms < 0 ? -lease_ms : lease_ms);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease_ms < 0 ? "flag" : "request");
    return send_hinted(st, &c, KIND_HINTED, q, (callback_t){ .messages = cb }, arg);
}

int rd_store_replay(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb,
                    void *arg)
{
    call_t c;
    begin_fcall(&c, st, "replay", q, id);
    arg_int(&c, id);
    /* Hinted for the series' nudge; replay's reply carries no timer hint. */
    return send_hinted(st, &c, KIND_MESSAGES, q, (callback_t){ .messages = cb }, arg);
}

int rd_store_get(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "get", q, id);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_int(&c, id);
    return send_call(st, &c, KIND_MESSAGES, (callback_t){ .messages = cb }, arg);
}

int rd_store_list(rd_store_t *st, rd_store_queue_t q, const char *status, int limit,
                  const char *cursor, const char *error_contains, long long since_ms,
                  long long until_ms, rd_store_list_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "list", q, 0);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_str(&c, status ? status : "");
    arg_int(&c, limit);
    arg_str(&c, cursor ? cursor : "");
    arg_str(&c, error_contains ? error_contains : "");
    if (since_ms >= 0) arg_int(&c, since_ms);
    else arg_str(&c, "");
    if (until_ms >= 0) arg_int(&c, until_ms);
    else arg_str(&c, "");
    return send_call(st, &c, KIND_LIST, (callback_t){ .list = cb }, arg);
}

int rd_store_succeed_many(rd_store_t *st, rd_store_queue_t q, size_t n, const long long *ids,
                          const char *const *tokens, rd_store_outcomes_cb cb, void *arg)
{
    if (n == 0 || n > RD_ACK_BATCH_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "succeed_many", q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, ids[i]);
        arg_str(c, tokens[i] ? tokens[i] : "");
    }
    arg_int(c, st->succeeded_ttl_ms);
    int rc = send_hinted(st, c, KIND_HINTED_OUTCOMES, q, (callback_t){ .outcomes = cb }, arg);
    rd_free(c);
    return rc;
}

int rd_store_settle_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                          const char *worker, size_t n, const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    if (n > RD_SETTLE_BATCH_MAX || count < 0 || count > RD_CLAIM_COUNT_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "settle_claim", q, 0);
    arg_int(c, lease_ms < 0 ? -lease_ms : lease_ms);
    arg_int(c, count);
    arg_int(c, (long long)n);
    for (size_t i = 0; i < n; i++) {
        const rd_settlement_t *s = &items[i];
        arg_int(c, s->id);
        arg_str(c, s->lease_token ? s->lease_token : "");
        arg_str(c, s->failed ? "failed" : "succeeded");
        arg_error(c, s->failed && s->error ? s->error : "");
        arg_str(c, s->retryable ? "1" : "0");
        arg_int(c, s->failed && s->retry_after_ms >= 0 ? s->retry_after_ms : -1);
    }
    arg_int(c, st->dead_ttl_ms);        /* asks for the timer hint */
    arg_int(c, st->succeeded_ttl_ms);
    arg_str(c, lease_ms < 0 ? "flag" : "request");
    arg_str(c, worker ? worker : "");
    if (count > 0) arg_nonce(c, st);
    int rc = send_hinted(st, c, KIND_SETTLED, q, (callback_t){ .settled = cb }, arg);
    rd_free(c);
    return rc;
}

int rd_store_release(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs,
                     rd_store_released_cb cb, void *arg)
{
    if (n == 0 || n > RD_CLAIM_COUNT_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "release", q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, msgs[i].id);
        arg_bytes(c, msgs[i].lease_token.ptr ? msgs[i].lease_token.ptr : "",
                  msgs[i].lease_token.len);
    }
    int rc = send_call(st, c, KIND_RELEASED, (callback_t){ .released = cb }, arg);
    rd_free(c);
    return rc;
}

static void send_hand_back(rd_store_t *st, hand_back_t *h);

/* Keeps a hand-back that Redis did not answer for rd_store_flush_owed. */
static void keep_hand_back(rd_store_t *st, hand_back_t *h)
{
    if (st->nhand_backs == HAND_BACK_MAX) {
        hand_back_t *old = st->hand_backs;
        rd_warn("store: more than %d hand-backs of departed clients' messages wait for Redis; "
                "the oldest (queue \"%.*s\") is dropped: its leases will expire instead",
                HAND_BACK_MAX, (int)old->len, old->queue);
        st->hand_backs = old->next;
        if (st->hand_backs == NULL) st->hand_backs_tail = NULL;
        st->nhand_backs--;
        hand_back_free(old);
    }
    h->next = NULL;
    if (st->hand_backs_tail) st->hand_backs_tail->next = h;
    else st->hand_backs = h;
    st->hand_backs_tail = h;
    st->nhand_backs++;
}

static void on_handed_back(const rd_store_released_t *res, void *arg)
{
    hand_back_t *h = arg;
    if (res->head.status == RD_STORE_OK || res->head.status == RD_STORE_ERROR) {
        /* Done, or Redis refused it: asking again would not help. */
        if (res->head.status == RD_STORE_ERROR)
            rd_warn("store: handing back messages of a departed client in queue \"%.*s\" "
                    "failed (%.*s); their leases will expire instead", (int)h->len, h->queue,
                    (int)res->head.detail.len, res->head.detail.ptr ? res->head.detail.ptr : "");
        hand_back_free(h);
        return;
    }
    /* No answer (the link dropped, or the call was not sent after all): sent
     * again once the link is back (docs/durability.md "A claim whose answer
     * is lost"). */
    rd_warn("store: handing back messages of a departed client in queue \"%.*s\" got no "
            "answer; sending it again when Redis answers", (int)h->len, h->queue);
    keep_hand_back(h->st, h);
}

static void send_hand_back(rd_store_t *st, hand_back_t *h)
{
    call_t *c = rd_malloc(sizeof *c);
    rd_store_queue_t q = { h->queue, h->len };
    begin_fcall(c, st, "release", q, 0);
    for (size_t i = 0; i < h->n; i++) {
        arg_int(c, h->ids[i]);
        arg_bytes(c, h->tokens[i], h->token_lens[i]);
    }
    int rc = send_call(st, c, KIND_RELEASED, (callback_t){ .released = on_handed_back }, h);
    rd_free(c);
    if (rc != 0) keep_hand_back(st, h);
}

void rd_store_hand_back(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs)
{
    for (size_t from = 0; from < n; from += RD_CLAIM_COUNT_MAX) {
        size_t batch = n - from < RD_CLAIM_COUNT_MAX ? n - from : RD_CLAIM_COUNT_MAX;
        hand_back_t *h = rd_calloc(1, sizeof *h);
        h->st = st;
        h->queue = rd_strndup(q.name, q.len);
        h->len = q.len;
        h->n = batch;
        for (size_t i = 0; i < batch; i++) {
            const rd_message_t *m = &msgs[from + i];
            h->ids[i] = m->id;
            h->tokens[i] = rd_strndup(m->lease_token.ptr ? m->lease_token.ptr : "",
                                      m->lease_token.len);
            h->token_lens[i] = m->lease_token.len;
        }
        send_hand_back(st, h);
    }
}

/* Sends the hand-backs kept by keep_hand_back again, oldest first. */
static void flush_hand_backs(rd_store_t *st)
{
    size_t n = st->nhand_backs;
    while (n-- > 0 && st->hand_backs && rd_backend_ready(st->redis)) {
        hand_back_t *h = st->hand_backs;
        st->hand_backs = h->next;
        if (st->hand_backs == NULL) st->hand_backs_tail = NULL;
        st->nhand_backs--;
        size_t before = st->nhand_backs;
        send_hand_back(st, h);
        if (st->nhand_backs > before) break;   /* not sent: kept again; next round */
    }
}

int rd_store_replay_many(rd_store_t *st, rd_store_queue_t q, const char *mode,
                         const long long *ids, size_t n, int limit, const char *cursor,
                         const char *needle, rd_store_replayed_cb cb, void *arg)
{
    bool by_id = strcmp(mode, "ids") == 0;
    if (by_id && (n == 0 || n > RD_STORE_REPLAY_IDS_MAX)) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "replay_many", q, 0);
    arg_str(c, mode);
    if (by_id) {
        for (size_t i = 0; i < n; i++) arg_int(c, ids[i]);
    } else {
        arg_int(c, limit);
        arg_str(c, cursor ? cursor : "");
        if (needle) arg_str(c, needle);
    }
    /* Hinted for the series' nudge; its reply carries no timer hint. */
    int rc = send_hinted(st, c, KIND_REPLAYED, q, (callback_t){ .replayed = cb }, arg);
    rd_free(c);
    return rc;
}

/* Any function of the library on q, with argv[0..argc) after KEYS[1] (the
 * redrive's calls, src/redrive.c); the reply is the caller's to read. */
int rd_store_fcall(rd_store_t *st, const char *fn, rd_store_queue_t q, size_t argc,
                   const char *const *argv, const size_t *lens, rd_store_raw_cb cb, void *arg)
{
    if (argc + 4 > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, fn, q, 0);
    for (size_t i = 0; i < argc; i++) arg_bytes(c, argv[i], lens[i]);
    int rc = send_call(st, c, KIND_RAW, (callback_t){ .raw = cb }, arg);
    rd_free(c);
    return rc;
}

void rd_store_register_queue(rd_store_t *st, rd_store_queue_t q)
{
    register_queue(st, q);
}

/* ---------------------------------------------------------------- batch replay to the end */

typedef struct replay_all {
    rd_store_t *st;
    char *queue;
    size_t queue_len;
    const char *mode, *needle;  /* borrowed until the callback */
    const long long *ids;
    size_t n;
    char *cursor;               /* where the next call starts; for ids, the offset */
    long long replayed;         /* so far */
    bool (*go_on)(void *arg);
    rd_store_replayed_cb cb;
    void *arg;
} replay_all_t;

static void on_replay_batch(const rd_store_replayed_t *res, void *arg);

static int replay_batch(replay_all_t *r)
{
    rd_store_queue_t q = { r->queue, r->queue_len };
    if (strcmp(r->mode, "ids") == 0) {
        size_t from = r->cursor ? strtoul(r->cursor, NULL, 10) : 0;
        size_t n = r->n - from < RD_STORE_REPLAY_IDS_MAX ? r->n - from : RD_STORE_REPLAY_IDS_MAX;
        return rd_store_replay_many(r->st, q, r->mode, r->ids + from, n, 0, NULL, NULL,
                                    on_replay_batch, r);
    }
    return rd_store_replay_many(r->st, q, r->mode, NULL, 0, RD_STORE_REPLAY_IDS_MAX, r->cursor,
                                r->needle, on_replay_batch, r);
}

static void replay_all_end(replay_all_t *r, rd_store_replayed_t *res)
{
    res->replayed = r->replayed;
    r->cb(res, r->arg);
    rd_free(r->cursor);
    rd_free(r->queue);
    rd_free(r);
}

/* One bounded call at a time, so other clients' commands interleave between
 * them. Stops when go_on says so (the client has gone), and when a call
 * neither replayed anything nor moved the cursor (a library that cannot make
 * progress, e.g. an older one during an upgrade) instead of calling again
 * forever. */
static void on_replay_batch(const rd_store_replayed_t *res, void *arg)
{
    replay_all_t *r = arg;
    if (res->head.status != RD_STORE_OK) {
        if (r->replayed > 0) rd_warn("store: batch replay stopped after %lld replayed", r->replayed);
        rd_store_replayed_t out = *res;
        replay_all_end(r, &out);
        return;
    }
    r->replayed += res->replayed;
    rd_str_t next = res->next_cursor;
    char offset[24];
    if (strcmp(r->mode, "ids") == 0) {
        size_t from = (r->cursor ? strtoul(r->cursor, NULL, 10) : 0) + RD_STORE_REPLAY_IDS_MAX;
        next.len = from < r->n ? (size_t)snprintf(offset, sizeof offset, "%zu", from) : 0;
        next.ptr = offset;
    }
    rd_store_replayed_t out = { .head.status = RD_STORE_OK };
    if (next.len > 0 && r->go_on && !r->go_on(r->arg)) {
        rd_info("store: batch replay stopped after %lld replayed: the client has gone",
                r->replayed);
        out.head.status = RD_STORE_UNAVAILABLE;
        replay_all_end(r, &out);
        return;
    }
    if (next.len > 0 && res->replayed == 0 && r->cursor && strlen(r->cursor) == next.len &&
        memcmp(r->cursor, next.ptr, next.len) == 0) {
        char detail[160];
        out.head.status = RD_STORE_ERROR;
        out.head.detail.ptr = detail;
        out.head.detail.len = (size_t)snprintf(detail, sizeof detail,
                                               "replay_many made no progress at cursor %.64s "
                                               "after %lld replayed; stopped", r->cursor,
                                               r->replayed);
        replay_all_end(r, &out);
        return;
    }
    if (next.len > 0) {
        rd_free(r->cursor);
        r->cursor = rd_strndup(next.ptr, next.len);
        if (replay_batch(r) == 0) return;
        out.head.status = RD_STORE_UNAVAILABLE;
    }
    replay_all_end(r, &out);
}

int rd_store_replay_all(rd_store_t *st, rd_store_queue_t q, const char *mode,
                        const long long *ids, size_t n, const char *needle,
                        bool (*go_on)(void *arg), rd_store_replayed_cb cb, void *arg)
{
    replay_all_t *r = rd_calloc(1, sizeof *r);
    r->st = st;
    r->queue = rd_strndup(q.name, q.len);
    r->queue_len = q.len;
    r->mode = mode;
    r->needle = needle;
    r->ids = ids;
    r->n = n;
    r->go_on = go_on;
    r->cb = cb;
    r->arg = arg;
    int rc = replay_batch(r);
    if (rc != 0) {
        rd_free(r->queue);
        rd_free(r);
    }
    return rc;
}

int rd_store_delete(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_status_cb cb,
                    void *arg)
{
    call_t c;
    begin_fcall(&c, st, "delete", q, id);
    arg_int(&c, id);
    return send_call(st, &c, KIND_DELETED, (callback_t){ .status = cb }, arg);
}

int rd_store_kill(rd_store_t *st, rd_store_queue_t q, long long id, const char *reason,
                  rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "kill", q, id);
    arg_int(&c, id);
    arg_str(&c, reason ? reason : "");
    arg_int(&c, st->dead_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, (callback_t){ .messages = cb }, arg);
}

int rd_store_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "stats", q, 0);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_int(&c, top);
    return send_call(st, &c, KIND_STATS, (callback_t){ .stats = cb }, arg);
}

int rd_store_tick(rd_store_t *st, rd_store_queue_t q, int limit, long long dead_ttl_ms,
                  long long succeeded_ttl_ms, rd_store_tick_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "tick", q, 0);
    arg_int(&c, limit);
    arg_int(&c, dead_ttl_ms);
    arg_int(&c, succeeded_ttl_ms);
    arg_str(&c, "1");   /* a timer round: the promise and `empty` */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 0);  /* and `alerts` */
    arg_str(&c, st->series ? "1" : "0");   /* samples the time series */
    /* Queues without their own alert_url have a destination only in a fleet
     * with --alert-url (otherwise their ticks look at no stream). */
    arg_str(&c, st->alert_url || st->fleet_alert_url ? "1" : "0");
    return send_call(st, &c, KIND_TICK, (callback_t){ .tick = cb }, arg);
}

int rd_store_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "series", q, 0);
    arg_str(&c, resolution);
    return send_call(st, &c, KIND_SERIES, (callback_t){ .series = cb }, arg);
}

/* FCALL fn 1 <registry> (the registry's slot: its companions are there too). */
static void begin_registry_fcall(call_t *c, rd_store_t *st, const char *fn)
{
    call_init(c);
    arg_str(c, "FCALL");
    int n = snprintf(c->fn, sizeof c->fn, "%s%s", RD_FUNCTION(""), fn);
    assert(n > 0 && (size_t)n < sizeof c->fn);
    arg_str(c, c->fn);
    arg_str(c, "1");
    arg_bytes(c, st->registry_key.data, st->registry_key.len);
}

int rd_store_queues_page(rd_store_t *st, const char *cursor, size_t cursor_len, int limit,
                         rd_store_page_cb cb, void *arg)
{
    call_t c;
    begin_registry_fcall(&c, st, "queues_page");
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_bytes(&c, cursor ? cursor : "", cursor ? cursor_len : 0);
    arg_int(&c, limit);
    return send_call(st, &c, KIND_PAGE, (callback_t){ .page = cb }, arg);
}

int rd_store_timer_take(rd_store_t *st, int limit, long long lease_ms, int sweep_batch,
                        long long sweep_every_ms, long long sweep_cycle_ms, rd_store_taken_cb cb,
                        void *arg)
{
    call_t c;
    begin_registry_fcall(&c, st, "timer_take");
    arg_int(&c, limit);
    arg_int(&c, lease_ms);
    arg_int(&c, sweep_batch);
    arg_int(&c, sweep_every_ms);
    arg_int(&c, sweep_cycle_ms);
    arg_str(&c, st->alert_url ? "1" : "0");  /* and the alert fields */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 1);  /* alert lease */
    return send_call(st, &c, KIND_TAKE, (callback_t){ .taken = cb }, arg);
}

int rd_store_timer_done(rd_store_t *st, long long token, const rd_timer_report_t *reports,
                        size_t n, rd_store_done_cb cb, void *arg)
{
    if (n == 0 || n > RD_STORE_REPORTS_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_registry_fcall(c, st, "timer_done");
    arg_int(c, token);
    for (size_t i = 0; i < n; i++) {
        arg_bytes(c, reports[i].queue.name, reports[i].queue.len);
        arg_int(c, reports[i].next_in_ms < 0 ? -1 : reports[i].next_in_ms);
        arg_str(c, reports[i].empty ? "1"
                   : reports[i].alerts == RD_TIMER_ALERTS_HANDOFF ? "a"
                   : reports[i].alerts == RD_TIMER_ALERTS_NONE ? "n" : "0");
    }
    int rc = send_call(st, c, KIND_DONE, (callback_t){ .done = cb }, arg);
    rd_free(c);
    return rc;
}

/* ---------------------------------------------------------------- every queue */

typedef struct fanout {
    rd_store_t *st;
    rd_store_queues_cb cb;
    void *arg;
    rd_queue_metrics_t *queues;
    size_t count, sent, outstanding;
    bool any_failed;
    long long total;
    char *next_cursor;          /* the page's, NULL at the end */
    size_t next_cursor_len;
    struct fanout *next;        /* in st's turn list while stats are still to send */
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
    rd_store_queues_t res = {
        .head.status = f->any_failed && f->count > 0 && !rd_store_ready(f->st)
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
    rd_store_queue_t q = { m->name, m->name_len };
    if (rd_store_stats(f->st, q, 0, on_fanout_stats, slot) == 0) {
        f->outstanding++;
        f->st->fanout_in_flight++;
    } else {
        f->any_failed = true;
        rd_free(slot);
    }
}

/* Keeps at most RD_STORE_FANOUT_IN_FLIGHT stats calls in flight across every
 * fan-out, one call per fan-out in turn, so eight clients listing 1000 queues
 * each put no more calls before another client's command in Redis than one
 * does; a fan-out finishes when its last call returns. */
static void fanout_pump(rd_store_t *st)
{
    if (st->fanout_pumping) return;  /* a callback below started a fan-out: served here */
    st->fanout_pumping = true;
    while (st->fanout_head && st->fanout_in_flight < RD_STORE_FANOUT_IN_FLIGHT) {
        fanout_t *f = st->fanout_head;
        st->fanout_head = f->next;
        if (st->fanout_head == NULL) st->fanout_tail = NULL;
        f->next = NULL;
        fanout_send_one(f);
        if (f->sent < f->count) {  /* its next call waits for the others' turns */
            if (st->fanout_tail) st->fanout_tail->next = f;
            else st->fanout_head = f;
            st->fanout_tail = f;
        } else if (f->outstanding == 0) {
            fanout_finish(f);
        }
    }
    st->fanout_pumping = false;
}

/* Puts a fan-out whose page came in line for its stats calls. */
static void fanout_start(fanout_t *f)
{
    rd_store_t *st = f->st;
    if (f->count == 0) {
        fanout_finish(f);
        return;
    }
    if (st->fanout_tail) st->fanout_tail->next = f;
    else st->fanout_head = f;
    st->fanout_tail = f;
    fanout_pump(st);
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
            rd_store_queue_t q = { m->name, m->name_len };
            rd_store_schedule(f->st, q, 0);
        }
    } else {
        f->any_failed = true;
    }
    rd_free(slot);
    f->outstanding--;
    rd_store_t *st = f->st;
    st->fanout_in_flight--;
    if (f->outstanding == 0 && f->sent == f->count) fanout_finish(f);
    fanout_pump(st);
}

static void on_fanout_page(const rd_store_page_t *res, void *arg)
{
    fanout_t *f = arg;
    if (res->head.status != RD_STORE_OK) {
        rd_store_queues_t failed = { .head = res->head };
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

int rd_store_queues_stats(rd_store_t *st, const char *cursor, size_t cursor_len, int limit,
                          rd_store_queues_cb cb, void *arg)
{
    fanout_t *f = rd_calloc(1, sizeof *f);
    f->st = st;
    f->cb = cb;
    f->arg = arg;
    int rc = rd_store_queues_page(st, cursor, cursor_len, limit, on_fanout_page, f);
    if (rc != 0) rd_free(f);
    return rc;
}

/* ---------------------------------------------------------------- the /metrics snapshot */

typedef struct snap_waiter {
    rd_store_queues_cb cb;
    void *arg;
    struct snap_waiter *next;
} snap_waiter_t;

/* The first RD_METRICS_MAX_QUEUES queues' numbers, as one fan-out read them,
 * shared by every scrape while younger than the scrape's max age. */
typedef struct snapshot {
    rd_store_t *st;
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
    rd_store_queues_t res = { .head = *head };
    if (head->status == RD_STORE_OK) {
        res.queues = sn->queues;
        res.count = sn->count;
        res.total = sn->total;
        res.age_ms = (long long)(uv_now(sn->st->loop) - sn->taken_ms);
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

static void on_snapshot_fanout(const rd_store_queues_t *res, void *arg)
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
        sn->taken_ms = uv_now(sn->st->loop);
        sn->valid = true;
    }
    snapshot_answer(sn, &res->head);
}

static void on_deliver_closed(uv_handle_t *h)
{
    rd_free(h);
}

static void snapshot_free(rd_store_t *st)
{
    snapshot_t *sn = st->snapshot;
    if (sn == NULL) return;
    /* Nothing should be waiting by now (the link closed first and answered
     * the refresh); answer any that are, exactly once. */
    rd_store_head_t away = { .status = RD_STORE_UNAVAILABLE };
    snapshot_answer(sn, &away);
    uv_close((uv_handle_t *)sn->deliver, on_deliver_closed);
    free_queue_metrics(sn->queues, sn->count);
    rd_free(sn);
    st->snapshot = NULL;
}

int rd_store_queues_snapshot(rd_store_t *st, long long max_age_ms, rd_store_queues_cb cb,
                             void *arg)
{
    snapshot_t *sn = st->snapshot;
    if (sn == NULL) {
        sn = st->snapshot = rd_calloc(1, sizeof *sn);
        sn->st = st;
        sn->deliver = rd_malloc(sizeof *sn->deliver);
        uv_timer_init(st->loop, sn->deliver);
        sn->deliver->data = sn;
    }
    uint64_t now = uv_now(st->loop);
    bool fresh = sn->valid && now - sn->taken_ms <= (uint64_t)(max_age_ms > 0 ? max_age_ms : 0);
    if (!fresh && !sn->refreshing) {
        if (rd_store_queues_stats(st, NULL, 0, RD_METRICS_MAX_QUEUES, on_snapshot_fanout, sn) != 0)
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

static void on_config(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    (void)arg;
    if (status != RD_REDIS_OK || rd_reply_type(reply) != RD_REPLY_ARRAY) {
        rd_debug("store: cannot read Redis's CONFIG; durability not checked");
        return;
    }
    for (size_t i = 0; i + 1 < rd_reply_len(reply); i += 2) {
        const rd_reply_t *name = rd_reply_at(reply, i), *value = rd_reply_at(reply, i + 1);
        size_t len;
        const char *v = rd_reply_str(value, &len);
        if (v == NULL) continue;
        if (rd_reply_is(name, "appendonly") && !rd_reply_is(value, "yes"))
            rd_warn("durability: Redis runs without AOF (appendonly no): a Redis crash loses "
                    "every message since the last snapshot; see docs/durability.md");
        else if (rd_reply_is(name, "appendfsync") && rd_reply_is(value, "no"))
            rd_warn("durability: appendfsync no: a machine crash can lose ~30 s of messages");
        else if (rd_reply_is(name, "maxmemory-policy") && !rd_reply_is(value, "noeviction"))
            rd_warn("durability: maxmemory-policy is %.*s: under memory pressure Redis may "
                    "evict message keys; use noeviction", (int)len, v);
    }
}

void rd_store_check_durability(rd_store_t *st)
{
    const char *argv[] = { "CONFIG", "GET", "ap*" };
    size_t lens[] = { 6, 3, 3 };
    rd_backend_command(st->redis, 3, argv, lens, on_config, NULL);
    argv[2] = "maxmemory-policy";
    lens[2] = strlen(argv[2]);
    rd_backend_command(st->redis, 3, argv, lens, on_config, NULL);
}

int rd_store_policy_get(rd_store_t *st, rd_store_queue_t q, rd_store_policy_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "policy_get", q, 0);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    return send_call(st, &c, KIND_POLICY, (callback_t){ .policy = cb }, arg);
}

int rd_store_policy_set(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                        rd_store_policy_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);  /* a queue with a policy is listed, messages or not */
    const char *pairs[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    size_t n = rd_policy_args(p, pairs, values);
    call_t c;
    begin_fcall(&c, st, "policy_set", q, 0);
    arg_str(&c, "replace");
    for (size_t i = 0; i < n; i++) arg_str(&c, pairs[i]);
    if (p->rules) {
        arg_str(&c, "dead_letter_rules");
        arg_bytes(&c, p->rules, p->rules_len);
    }
    if (p->alert_url) {
        arg_str(&c, "alert_url");
        arg_bytes(&c, p->alert_url, p->alert_url_len);
    }
    return send_call(st, &c, KIND_POLICY, (callback_t){ .policy = cb }, arg);
}

int rd_store_pause(rd_store_t *st, rd_store_queue_t q, bool paused, rd_store_policy_cb cb,
                   void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);
    call_t c;
    begin_fcall(&c, st, "pause", q, 0);
    arg_str(&c, paused ? "1" : "0");
    return send_call(st, &c, KIND_PAUSED, (callback_t){ .policy = cb }, arg);
}

int rd_store_ping(rd_store_t *st, rd_store_status_cb cb, void *arg)
{
    call_t c;
    call_init(&c);
    arg_str(&c, "PING");
    return send_call(st, &c, KIND_PING, (callback_t){ .status = cb }, arg);
}
