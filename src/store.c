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
};

/* ---------------------------------------------------------------- the table of operations */

/* A callback of any operation as an op keeps it: the row's deliver casts it
 * back to the operation's own type (rd_store_<result>_cb). */
typedef void (*any_cb_t)(void);

/* What a row's command is. */
enum {
    F_RO = 1,           /* FCALL_RO or a plain read: it cannot write, so a lost answer
                           is UNAVAILABLE (not done), never LOST */
    F_NO_OUTCOME = 2,   /* writes nothing a caller could be unsure of (series' sample):
                           a lost answer is UNAVAILABLE too */
    F_REGISTRY = 4,     /* KEYS[1] is the registry (its slot), not a queue's base */
    F_COMMAND = 8,      /* a Redis command (the row's name), not a library function */
    F_HINTED = 16,      /* the reply may carry a timer hint for q, and a write nudges
                           q's series (series_nudge) */
};

/* One row per library function (and per plain command the store sends),
 * the way redis's command table has one per command: the function's name,
 * what kind of call it is, its typed result and the parser that fills it,
 * what frees it, and the thunk that hands it to the operation's callback.
 * The argv builder is the operation's rd_store_<name> below: it starts with
 * begin_op(c, st, OP_<NAME>, ...) and ends with send_op(); docs/design.md "How to
 * add a library function". */
typedef struct op_def {
    const char *name;
    unsigned flags;
    size_t result_size;         /* the result type's, at most RESULT_BYTES */
    /* Fills res (zeroed) from a reply that is not an error reply; kept is
     * what the builder kept for it (NULL: nothing), *hint the call's timer
     * hint (-1 none). False: a reply of another shape (RD_STORE_ERROR). A
     * parser may set res's head (an outcome other than OK). */
    bool (*parse)(const rd_reply_t *reply, const void *kept, void *res, long long *hint);
    void (*free)(void *res);    /* what parse allocated (NULL: nothing) */
    void (*deliver)(any_cb_t cb, const void *res, void *arg);
} op_def_t;

typedef enum op_id {
    OP_ENQUEUE, OP_CLAIM, OP_SETTLE_CLAIM, OP_SUCCEED, OP_SUCCEED_MANY, OP_FAIL, OP_EXTEND,
    OP_RELEASE, OP_RELEASE_LOST, OP_REPLAY, OP_REPLAY_MANY, OP_KILL, OP_DELETE, OP_GET,
    OP_LIST, OP_STATS, OP_SERIES, OP_TICK, OP_POLICY_GET, OP_POLICY_SET, OP_PAUSE,
    OP_ALERTS_TAKE, OP_ALERTS_ACK, OP_ALERTS_TOUCH,
    OP_REDRIVE_TAKE, OP_REDRIVE_IN, OP_REDRIVE_DONE, OP_REDRIVE_FORGET,
    OP_REGISTER, OP_TIMER_TAKE, OP_TIMER_DONE, OP_QUEUES_PAGE,
    OP_PING, OP_CONFIG_GET,
    OP_COUNT
} op_id_t;

static const op_def_t ops[OP_COUNT];

/* What enqueue sent, to build the new message from {"ok", id, now}. */
typedef struct enqueued {
    char *payload;              /* owned copies */
    size_t payload_len;
    char *idempotency_key;
    int max_retries;
    long long delay_ms;
} enqueued_t;

typedef struct op {
    const op_def_t *def;
    bool read_only;             /* F_RO or F_NO_OUTCOME */
    any_cb_t cb;
    void *arg;
    void *kept;                 /* owned: what the builder kept for the parser */
    void (*kept_free)(void *kept);
    rd_store_t *st;
    char *queue;                /* owned: where a timer hint goes (F_HINTED rows) */
    size_t queue_len;
    bool nudge;                 /* a write to queue: nudge its series (series_nudge) */
    char what[48];              /* the function (or command) called, for the log */
    char nonce[NONCE_MAX];      /* a claim's nonce ("" for none): lost answer -> lose_claim */
} op_t;

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



/* ---------------------------------------------------------------- the rows' parsers */

/* Each is a row's parse (op_def_t): reply -> its typed result. */

static bool parse_enqueue_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    return parse_enqueued(r, kept, res, hint);
}

/* get, replay: {"ok", msg} or an outcome. */
static bool parse_message_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_messages_t *m = res;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK && m->head.status != RD_STORE_DUPLICATE) return true;
    return parse_messages(r, 1, rd_reply_len(r), &m->messages, &m->count);
}

/* succeed, fail, extend, kill: {"ok", msg..., timer} or an outcome. */
static bool parse_hinted_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept;
    rd_store_messages_t *m = res;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK) return true;
    size_t n = rd_reply_len(r);
    return n >= 2 && rd_reply_int(rd_reply_at(r, n - 1), hint) &&
           parse_messages(r, 1, n - 1, &m->messages, &m->count);
}

/* claim: {"ok", leased..., timer[, retry_ms]}; a library without the policy
 * answers no retry_ms. */
static bool parse_claim_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept;
    rd_store_messages_t *m = res;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK) return true;
    size_t n = rd_reply_len(r);
    if (n >= 3 && rd_reply_type(rd_reply_at(r, n - 2)) == RD_REPLY_INTEGER) {
        if (!rd_reply_int(rd_reply_at(r, n - 1), &m->retry_ms)) return false;
        n--;
    }
    return n >= 2 && rd_reply_int(rd_reply_at(r, n - 1), hint) &&
           parse_leased_messages(r, 1, n - 1, &m->messages, &m->count);
}

static bool parse_settle_claim_reply(const rd_reply_t *r, const void *kept, void *res,
                                     long long *hint)
{
    (void)kept;
    return parse_settled(r, res, hint);
}

/* succeed_many: {code..., timer}. */
static bool parse_succeed_many_reply(const rd_reply_t *r, const void *kept, void *res,
                                     long long *hint)
{
    (void)kept;
    rd_store_outcomes_t *o = res;
    if (!is_array(r, 1)) return false;
    size_t n = rd_reply_len(r);
    if (!rd_reply_int(rd_reply_at(r, n - 1), hint)) return false;
    o->outcomes = rd_calloc(n, sizeof *o->outcomes);
    for (size_t i = 0; i + 1 < n; i++) {
        o->outcomes[i].ptr = rd_reply_str(rd_reply_at(r, i), &o->outcomes[i].len);
        if (o->outcomes[i].ptr == NULL) return false;
    }
    o->count = n - 1;
    return true;
}

/* release, release_lost: how many were handed back. */
static bool parse_released_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_released_t *)res)->released);
}

/* replay_many: {replayed, next_cursor} or {"bad_cursor"}. */
static bool parse_replayed_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_replayed_t *p = res;
    if (!is_array(r, 1)) return false;
    if (rd_reply_is(rd_reply_at(r, 0), "bad_cursor")) {
        p->head.status = RD_STORE_BAD_CURSOR;
        return true;
    }
    if (rd_reply_len(r) != 2 || !rd_reply_int(rd_reply_at(r, 0), &p->replayed)) return false;
    p->next_cursor.ptr = rd_reply_str(rd_reply_at(r, 1), &p->next_cursor.len);
    return p->next_cursor.ptr != NULL;
}

/* delete: an outcome alone. */
static bool parse_outcome_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_outcome(r, res);
}

/* list: {"ok", total, next_cursor, msg...} or an outcome. */
static bool parse_list_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_list_t *l = res;
    if (!parse_outcome(r, &l->head)) return false;
    if (l->head.status != RD_STORE_OK) return true;
    if (!is_array(r, 3) || !rd_reply_int(rd_reply_at(r, 1), &l->total)) return false;
    l->next_cursor.ptr = rd_reply_str(rd_reply_at(r, 2), &l->next_cursor.len);
    return l->next_cursor.ptr != NULL &&
           parse_messages(r, 3, rd_reply_len(r), &l->messages, &l->count);
}

static bool parse_stats_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_stats(r, &((rd_store_stats_result_t *)res)->stats);
}

static bool parse_series_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_series(r, res);
}

/* tick: {promoted, reclaimed, expired, next_in_ms, ready, empty[, alerts]}. */
static bool parse_tick_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_tick_t *t = res;
    long long empty, alerts = 0;
    size_t n = rd_reply_len(r);
    if (!((n == 6 || (n == 7 && rd_reply_int(rd_reply_at(r, 6), &alerts))) &&
          rd_reply_int(rd_reply_at(r, 0), &t->promoted) &&
          rd_reply_int(rd_reply_at(r, 1), &t->reclaimed) &&
          rd_reply_int(rd_reply_at(r, 2), &t->expired) &&
          rd_reply_int(rd_reply_at(r, 3), &t->next_in_ms) &&
          rd_reply_int(rd_reply_at(r, 4), &t->ready) &&
          rd_reply_int(rd_reply_at(r, 5), &empty)))
        return false;
    t->empty = empty == 1;
    t->alerts = alerts == 1 || alerts == 2 ? (int)alerts : 0;
    t->alerts_checked = n == 7;
    return true;
}

static bool parse_policy_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_policy(r, res);
}

/* pause: 1 | 0, the pause as it is now. */
static bool parse_paused_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_policy_t *p = res;
    long long paused;
    if (!rd_reply_int(r, &paused)) return false;
    rd_policy_init(&p->policy);
    p->policy.paused = paused == 1;
    return true;
}

/* alerts_take: {more, url, (stream_id, id, error, retry_count, at)...}. An
 * entry's fields are read as the sender always read them: a missing string
 * stays NULL, a number that is not one stays 0. */
static bool parse_alerts_take_reply(const rd_reply_t *r, const void *kept, void *res,
                                    long long *hint)
{
    (void)kept, (void)hint;
    rd_store_alerts_taken_t *t = res;
    size_t len = rd_reply_len(r);
    if (!is_array(r, 2) || (len - 2) % 5 != 0 || !rd_reply_int(rd_reply_at(r, 0), &t->more))
        return false;
    t->url.ptr = rd_reply_str(rd_reply_at(r, 1), &t->url.len);
    t->count = (len - 2) / 5;
    t->alerts = rd_calloc(t->count ? t->count : 1, sizeof *t->alerts);
    for (size_t i = 0; i < t->count; i++) {
        rd_store_alert_t *a = &t->alerts[i];
        size_t at = 2 + 5 * i;
        a->stream_id.ptr = rd_reply_str(rd_reply_at(r, at), &a->stream_id.len);
        rd_reply_int(rd_reply_at(r, at + 1), &a->id);
        a->error.ptr = rd_reply_str(rd_reply_at(r, at + 2), &a->error.len);
        rd_reply_int(rd_reply_at(r, at + 3), &a->retry_count);
        rd_reply_int(rd_reply_at(r, at + 4), &a->at_ms);
    }
    return true;
}

/* One number (register, alerts_ack, redrive_done, redrive_forget). */
static bool parse_count_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_count_t *)res)->n);
}

/* An array whose elements are read as strings where they are strings
 * (alerts_touch, CONFIG GET). */
static bool parse_strings_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_strings_t *s = res;
    if (!is_array(r, 0)) return false;
    s->count = rd_reply_len(r);
    s->strings = rd_calloc(s->count ? s->count : 1, sizeof *s->strings);
    for (size_t i = 0; i < s->count; i++)
        s->strings[i].ptr = rd_reply_str(rd_reply_at(r, i), &s->strings[i].len);
    return true;
}

/* redrive_take: {resumed, next, {id, target, max_retries, payload}...} or
 * {"bad_cursor"}. */
static bool parse_redrive_take_reply(const rd_reply_t *r, const void *kept, void *res,
                                     long long *hint)
{
    (void)kept, (void)hint;
    rd_store_redrive_taken_t *t = res;
    if (rd_reply_len(r) == 1 && rd_reply_is(rd_reply_at(r, 0), "bad_cursor")) {
        t->head.status = RD_STORE_BAD_CURSOR;
        return true;
    }
    long long resumed;
    if (!is_array(r, 2) || !rd_reply_int(rd_reply_at(r, 0), &resumed)) return false;
    t->next.ptr = rd_reply_str(rd_reply_at(r, 1), &t->next.len);
    if (t->next.ptr == NULL) return false;
    t->resumed = resumed == 1;
    size_t count = rd_reply_len(r) - 2;
    t->letters = rd_calloc(count ? count : 1, sizeof *t->letters);
    for (size_t i = 0; i < count; i++) {
        const rd_reply_t *e = rd_reply_at(r, 2 + i);
        rd_store_letter_t *l = &t->letters[i];
        if (!is_array(e, 4) || rd_reply_len(e) != 4 || !rd_reply_int(rd_reply_at(e, 0), &l->id) ||
            (l->target.ptr = rd_reply_str(rd_reply_at(e, 1), &l->target.len)) == NULL ||
            !rd_reply_int(rd_reply_at(e, 2), &l->max_retries) ||
            (l->payload.ptr = rd_reply_str(rd_reply_at(e, 3), &l->payload.len)) == NULL)
            return false;
        t->count = i + 1;
    }
    return true;
}

/* redrive_in: {new_id...}. */
static bool parse_ids_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_ids_t *s = res;
    if (!is_array(r, 0)) return false;
    s->count = rd_reply_len(r);
    s->ids = rd_calloc(s->count ? s->count : 1, sizeof *s->ids);
    for (size_t i = 0; i < s->count; i++)
        if (!rd_reply_int(rd_reply_at(r, i), &s->ids[i])) return false;
    return true;
}

/* timer_take: {token, next_in_ms, fleet_alert_url, n, alert name x n, name...}. */
static bool parse_timer_take_reply(const rd_reply_t *r, const void *kept, void *res,
                                   long long *hint)
{
    (void)kept, (void)hint;
    rd_store_taken_t *t = res;
    long long fleet, n;
    if (!is_array(r, 4) || !rd_reply_int(rd_reply_at(r, 0), &t->token) ||
        !rd_reply_int(rd_reply_at(r, 1), &t->next_in_ms) ||
        !rd_reply_int(rd_reply_at(r, 2), &fleet) ||
        !rd_reply_int(rd_reply_at(r, 3), &n) || n < 0 ||
        (size_t)n > rd_reply_len(r) - 4 ||
        !parse_strings_from(r, 4, &t->alert_names, &t->count))
        return false;
    t->fleet_alert_url = fleet == 1;
    t->alert_count = (size_t)n;
    t->names = t->alert_names + n;
    t->count -= (size_t)n;
    return true;
}

static bool parse_timer_done_reply(const rd_reply_t *r, const void *kept, void *res,
                                   long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_done_t *)res)->left);
}

/* queues_page: {total, next_cursor, name...}. */
static bool parse_page_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_page_t *p = res;
    if (!is_array(r, 2) || !rd_reply_int(rd_reply_at(r, 0), &p->total)) return false;
    p->next_cursor.ptr = rd_reply_str(rd_reply_at(r, 1), &p->next_cursor.len);
    return p->next_cursor.ptr != NULL && parse_strings_from(r, 2, &p->names, &p->count);
}

static bool parse_pong_reply(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)res, (void)hint;
    return rd_reply_is(r, "PONG");
}

/* ---------------------------------------------------------------- the rows' frees */

static void free_messages(void *res)
{
    rd_free(((rd_store_messages_t *)res)->messages);
}

static void free_list(void *res)
{
    rd_free(((rd_store_list_t *)res)->messages);
}

static void free_outcomes(void *res)
{
    rd_free(((rd_store_outcomes_t *)res)->outcomes);
}

static void free_settled(void *res)
{
    rd_store_settled_t *s = res;
    rd_free(s->outcomes);
    rd_free(s->messages);
}

static void free_stats(void *res)
{
    rd_store_stats_result_t *s = res;
    rd_free(s->stats.totals);
    rd_free(s->stats.top_errors);
}

static void free_series(void *res)
{
    rd_free(((rd_store_series_t *)res)->values);
}

static void free_page(void *res)
{
    rd_free(((rd_store_page_t *)res)->names);
}

static void free_taken(void *res)
{
    rd_free(((rd_store_taken_t *)res)->alert_names);  /* names point into it */
}

static void free_alerts_taken(void *res)
{
    rd_free(((rd_store_alerts_taken_t *)res)->alerts);
}

static void free_strings(void *res)
{
    rd_free(((rd_store_strings_t *)res)->strings);
}

static void free_redrive_taken(void *res)
{
    rd_free(((rd_store_redrive_taken_t *)res)->letters);
}

static void free_ids(void *res)
{
    rd_free(((rd_store_ids_t *)res)->ids);
}

/* ---------------------------------------------------------------- the table */

/* deliver_<cb>: hands a result to a callback of type rd_store_<cb>_cb. */
#define DELIVER(result_type, cb_type)                                              \
    static void deliver_##cb_type(any_cb_t cb, const void *res, void *arg)       \
    {                                                                            \
        ((cb_type)cb)((const result_type *)res, arg);                            \
    }
DELIVER(rd_store_head_t, rd_store_status_cb)
DELIVER(rd_store_messages_t, rd_store_messages_cb)
DELIVER(rd_store_list_t, rd_store_list_cb)
DELIVER(rd_store_outcomes_t, rd_store_outcomes_cb)
DELIVER(rd_store_settled_t, rd_store_settled_cb)
DELIVER(rd_store_released_t, rd_store_released_cb)
DELIVER(rd_store_replayed_t, rd_store_replayed_cb)
DELIVER(rd_store_stats_result_t, rd_store_stats_cb)
DELIVER(rd_store_tick_t, rd_store_tick_cb)
DELIVER(rd_store_series_t, rd_store_series_cb)
DELIVER(rd_store_page_t, rd_store_page_cb)
DELIVER(rd_store_taken_t, rd_store_taken_cb)
DELIVER(rd_store_done_t, rd_store_done_cb)
DELIVER(rd_store_policy_t, rd_store_policy_cb)
DELIVER(rd_store_count_t, rd_store_count_cb)
DELIVER(rd_store_strings_t, rd_store_strings_cb)
DELIVER(rd_store_alerts_taken_t, rd_store_alerts_taken_cb)
DELIVER(rd_store_redrive_taken_t, rd_store_redrive_taken_cb)
DELIVER(rd_store_ids_t, rd_store_ids_cb)
#undef DELIVER

/* Every result fits the buffer on_reply parses into. */
enum { RESULT_BYTES = 512 };
#define FITS(type) (sizeof(type) + 0 * sizeof(char[sizeof(type) <= RESULT_BYTES ? 1 : -1]))

/* ROW(id, name, flags, result type, parse, free, callback type) */
#define ROW(id, name, flags, type, parse, free, cb_type) \
    [id] = { name, flags, FITS(type), parse, free, deliver_##cb_type }

static const op_def_t ops[OP_COUNT] = {
    ROW(OP_ENQUEUE, "enqueue", F_HINTED, rd_store_messages_t, parse_enqueue_reply,
        free_messages, rd_store_messages_cb),
    ROW(OP_CLAIM, "claim", F_HINTED, rd_store_messages_t, parse_claim_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_SETTLE_CLAIM, "settle_claim", F_HINTED, rd_store_settled_t, parse_settle_claim_reply,
        free_settled, rd_store_settled_cb),
    ROW(OP_SUCCEED, "succeed", F_HINTED, rd_store_messages_t, parse_hinted_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_SUCCEED_MANY, "succeed_many", F_HINTED, rd_store_outcomes_t,
        parse_succeed_many_reply, free_outcomes, rd_store_outcomes_cb),
    ROW(OP_FAIL, "fail", F_HINTED, rd_store_messages_t, parse_hinted_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_EXTEND, "extend", F_HINTED, rd_store_messages_t, parse_hinted_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_RELEASE, "release", 0, rd_store_released_t, parse_released_reply, NULL,
        rd_store_released_cb),
    ROW(OP_RELEASE_LOST, "release_lost", 0, rd_store_released_t, parse_released_reply, NULL,
        rd_store_released_cb),
    /* replay and replay_many are hinted for the series' nudge; their replies
     * carry no timer hint. */
    ROW(OP_REPLAY, "replay", F_HINTED, rd_store_messages_t, parse_message_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_REPLAY_MANY, "replay_many", F_HINTED, rd_store_replayed_t, parse_replayed_reply,
        NULL, rd_store_replayed_cb),
    ROW(OP_KILL, "kill", F_HINTED, rd_store_messages_t, parse_hinted_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_DELETE, "delete", 0, rd_store_head_t, parse_outcome_reply, NULL, rd_store_status_cb),
    ROW(OP_GET, "get", F_RO, rd_store_messages_t, parse_message_reply, free_messages,
        rd_store_messages_cb),
    ROW(OP_LIST, "list", F_RO, rd_store_list_t, parse_list_reply, free_list, rd_store_list_cb),
    ROW(OP_STATS, "stats", F_RO, rd_store_stats_result_t, parse_stats_reply, free_stats,
        rd_store_stats_cb),
    ROW(OP_SERIES, "series", F_NO_OUTCOME, rd_store_series_t, parse_series_reply, free_series,
        rd_store_series_cb),
    ROW(OP_TICK, "tick", 0, rd_store_tick_t, parse_tick_reply, NULL, rd_store_tick_cb),
    ROW(OP_POLICY_GET, "policy_get", F_RO, rd_store_policy_t, parse_policy_reply, NULL,
        rd_store_policy_cb),
    ROW(OP_POLICY_SET, "policy_set", 0, rd_store_policy_t, parse_policy_reply, NULL,
        rd_store_policy_cb),
    ROW(OP_PAUSE, "pause", 0, rd_store_policy_t, parse_paused_reply, NULL, rd_store_policy_cb),
    ROW(OP_ALERTS_TAKE, "alerts_take", 0, rd_store_alerts_taken_t, parse_alerts_take_reply,
        free_alerts_taken, rd_store_alerts_taken_cb),
    ROW(OP_ALERTS_ACK, "alerts_ack", 0, rd_store_count_t, parse_count_reply, NULL,
        rd_store_count_cb),
    ROW(OP_ALERTS_TOUCH, "alerts_touch", 0, rd_store_strings_t, parse_strings_reply,
        free_strings, rd_store_strings_cb),
    ROW(OP_REDRIVE_TAKE, "redrive_take", 0, rd_store_redrive_taken_t, parse_redrive_take_reply,
        free_redrive_taken, rd_store_redrive_taken_cb),
    ROW(OP_REDRIVE_IN, "redrive_in", 0, rd_store_ids_t, parse_ids_reply, free_ids,
        rd_store_ids_cb),
    ROW(OP_REDRIVE_DONE, "redrive_done", 0, rd_store_count_t, parse_count_reply, NULL,
        rd_store_count_cb),
    ROW(OP_REDRIVE_FORGET, "redrive_forget", 0, rd_store_count_t, parse_count_reply, NULL,
        rd_store_count_cb),
    ROW(OP_REGISTER, "register", F_REGISTRY, rd_store_count_t, parse_count_reply, NULL,
        rd_store_count_cb),
    ROW(OP_TIMER_TAKE, "timer_take", F_REGISTRY, rd_store_taken_t, parse_timer_take_reply,
        free_taken, rd_store_taken_cb),
    ROW(OP_TIMER_DONE, "timer_done", F_REGISTRY, rd_store_done_t, parse_timer_done_reply, NULL,
        rd_store_done_cb),
    ROW(OP_QUEUES_PAGE, "queues_page", F_REGISTRY | F_RO, rd_store_page_t, parse_page_reply,
        free_page, rd_store_page_cb),
    ROW(OP_PING, "PING", F_COMMAND | F_RO, rd_store_head_t, parse_pong_reply, NULL,
        rd_store_status_cb),
    ROW(OP_CONFIG_GET, "CONFIG", F_COMMAND | F_RO, rd_store_strings_t, parse_strings_reply,
        free_strings, rd_store_strings_cb),
};
#undef ROW
#undef FITS


/* ---------------------------------------------------------------- calls */

static void free_op(op_t *op)
{
    rd_free(op->queue);
    if (op->kept) op->kept_free(op->kept);
    rd_free(op);
}

static void send_register(rd_store_t *st, const char *name, size_t len, long long in_ms);
static void series_nudge(rd_store_t *st, const op_t *op, bool hinted);
static void lose_claim(rd_store_t *st, const char *queue, size_t len, const char *nonce);
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
static bool claimed_nothing(const op_def_t *def, const void *res)
{
    if (def == &ops[OP_CLAIM]) return ((const rd_store_messages_t *)res)->count == 0;
    const rd_store_settled_t *s = res;
    if (def != &ops[OP_SETTLE_CLAIM] || s->count > 0) return false;
    for (size_t i = 0; i < s->settled; i++) {
        const rd_str_t *o = &s->outcomes[i];
        bool applied = (o->len == 9 && memcmp(o->ptr, "succeeded", 9) == 0) ||
                       (o->len == 7 && memcmp(o->ptr, "pending", 7) == 0) ||
                       (o->len == 4 && memcmp(o->ptr, "dead", 4) == 0);
        if (applied) return false;
    }
    return true;
}

/* The one completion path of every operation: the reply (or the lost link)
 * becomes the row's typed result, the timer hears of its hint, the callback
 * runs, and the result is freed. */
static void on_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    op_t *op = arg;
    const op_def_t *def = op->def;
    _Alignas(max_align_t) unsigned char res[RESULT_BYTES];
    rd_store_head_t *head = (rd_store_head_t *)res;
    memset(res, 0, def->result_size);
    long long hint = -1;
    bool hint_unknown = false;  /* the call may have written, its hint is not known */
    char detail[160];
    if (status == RD_REDIS_LOST) {
        hint_unknown = !op->read_only;
        /* A read has no outcome to be unsure of: it simply was not done. */
        head->status = op->read_only ? RD_STORE_UNAVAILABLE : RD_STORE_LOST;
    } else if (status == RD_REDIS_NOT_SENT) {
        head->status = RD_STORE_UNAVAILABLE;
    } else if (rd_reply_type(reply) == RD_REPLY_ERROR) {
        head->status = RD_STORE_ERROR;
        head->detail.ptr = rd_reply_str(reply, &head->detail.len);
    } else if (!def->parse(reply, op->kept, res, &hint)) {
        char got[64];
        describe_reply(reply, got, sizeof got);
        if (def->free) def->free(res);
        memset(res, 0, def->result_size);
        head->status = RD_STORE_ERROR;
        snprintf(detail, sizeof detail, "unexpected reply to %s: %s", op->what, got);
        rd_error("store: %s (another version of the library?)", detail);
        head->detail.ptr = detail;
        head->detail.len = strlen(detail);
        hint = -1;
        hint_unknown = true;
    }
    /* The hint goes to the schedule before anyone hears of the new work. An
     * enqueue that got id 1 may follow a round that found the queue without
     * keys and is removing it from the registry: it registers again
     * whatever this process remembers (docs/design.md, "Leaving the
     * registry"). */
    if (op->queue && head->status == RD_STORE_OK) {
        const rd_store_messages_t *m = (const rd_store_messages_t *)res;
        bool first = def == &ops[OP_ENQUEUE] && m->count == 1 && m->messages[0].id == 1;
        /* A hint within the nudge's minute stands for the nudge. */
        if (op->nudge && !claimed_nothing(def, res))
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
    def->deliver(op->cb, res, op->arg);
    if (def->free) def->free(res);
    free_op(op);
}

/* FCALL name numkeys base, then at most RD_ACK_BATCH_MAX (id, token) pairs, a
 * mode and RD_STORE_REPLAY_IDS_MAX ids, or settle_claim's 3 + 6 per settlement
 * + 2. */
enum { MAX_ARGS = 10 + 6 * RD_SETTLE_BATCH_MAX };
_Static_assert(2 * RD_ACK_BATCH_MAX <= 6 * RD_SETTLE_BATCH_MAX &&
               RD_STORE_REPLAY_IDS_MAX <= 6 * RD_SETTLE_BATCH_MAX, "every call fits MAX_ARGS");
_Static_assert(5 + 3 * RD_STORE_REPORTS_MAX <= MAX_ARGS, "timer_done's reports fit a call");

/* One command being built: its row, its argv and what the row's parser
 * will need. */
typedef struct call {
    const op_def_t *def;
    rd_store_queue_t q;             /* the queue of a queue's function */
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char numbers[MAX_ARGS][24];     /* storage for formatted integers */
    char fn[48];                    /* the versioned function name */
    char nonce[NONCE_MAX];          /* a claim's nonce (arg_nonce), "" for none */
    rd_buf_t base, mkey;
    void *kept;                     /* for the parser (owned until send) */
    void (*kept_free)(void *kept);
} call_t;

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

static const rd_store_queue_t NO_QUEUE = { NULL, 0 };

/* Starts the command of row id: FCALL (FCALL_RO for a read) <library>_name
 * with KEYS[1] the queue's base (id > 0 adds the message key as KEYS[2]) or
 * the registry; a plain command is its name. Every call goes through here,
 * so the library's version is added in one place. Not a memset: the
 * argument arrays are large and filled as they are used. */
static void begin_op(call_t *c, rd_store_t *st, op_id_t id, rd_store_queue_t q, long long msg_id)
{
    const op_def_t *def = &ops[id];
    c->def = def;
    c->q = q;
    c->argc = 0;
    c->nonce[0] = '\0';
    c->base = (rd_buf_t)RD_BUF_INIT;
    c->mkey = (rd_buf_t)RD_BUF_INIT;
    c->kept = NULL;
    c->kept_free = NULL;
    if (def->flags & F_COMMAND) {
        arg_str(c, def->name);
        return;
    }
    arg_str(c, def->flags & F_RO ? "FCALL_RO" : "FCALL");
    int n = snprintf(c->fn, sizeof c->fn, "%s%s", RD_FUNCTION(""), def->name);
    assert(n > 0 && (size_t)n < sizeof c->fn);
    arg_str(c, c->fn);
    if (def->flags & F_REGISTRY) {
        arg_str(c, "1");
        arg_bytes(c, st->registry_key.data, st->registry_key.len);
        return;
    }
    rd_keys_queue_base(&c->base, st->prefix, q.name, q.len);
    arg_str(c, msg_id > 0 ? "2" : "1");
    arg_bytes(c, c->base.data, c->base.len);
    if (msg_id > 0) {
        rd_keys_message(&c->mkey, c->base.data, c->base.len, msg_id);
        arg_bytes(c, c->mkey.data, c->mkey.len);
    }
}

/* send_op: sends c; cb is the operation's callback (its row's type), run exactly
 * once from the loop unless this returns -1. */
static int send_op(rd_store_t *st, call_t *c, any_cb_t cb, void *arg)
{
    const op_def_t *def = c->def;
    op_t *op = rd_malloc(sizeof *op);
    op->def = def;
    op->read_only = (def->flags & (F_RO | F_NO_OUTCOME)) != 0;
    op->cb = cb;
    op->arg = arg;
    op->kept = c->kept;
    op->kept_free = c->kept_free;
    op->st = st;
    bool hinted = (def->flags & F_HINTED) != 0;
    op->queue = hinted ? rd_strndup(c->q.name, c->q.len) : NULL;
    op->queue_len = hinted ? c->q.len : 0;
    op->nudge = hinted && !op->read_only;
    memcpy(op->nonce, c->nonce, sizeof op->nonce);
    snprintf(op->what, sizeof op->what, "%s", def->flags & F_COMMAND ? def->name : c->fn);
    int rc = rd_backend_command(st->redis, c->argc, c->argv, c->lens, on_reply, op);
    if (rc != 0) free_op(op);
    rd_buf_free(&c->base);
    rd_buf_free(&c->mkey);
    return rc;
}

#define CB(cb) ((any_cb_t)(cb))

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

static void on_register(const rd_store_count_t *res, void *arg)
{
    registration_t *g = arg;
    rd_store_t *st = g->st;
    registry_slot_t *slot = registry_slot(st, g->name, g->len);
    if (res->head.status == RD_STORE_OK) {
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
            rd_str_t why = res->head.detail;
            if (why.ptr == NULL) {
                why.ptr = res->head.status == RD_STORE_LOST ? "the link dropped" : "not sent";
                why.len = strlen(why.ptr);
            }
            rd_warn("store: registering queue %.*s failed (%.*s); sending it again each tick",
                    (int)g->len, g->name, (int)why.len, why.ptr);
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
    call_t c;
    begin_op(&c, st, OP_REGISTER, NO_QUEUE, 0);
    arg_bytes(&c, name, len);
    arg_int(&c, in_ms < 0 ? -1LL : in_ms);
    if (send_op(st, &c, CB(on_register), g) != 0) {
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
        begin_op(c, st, OP_RELEASE_LOST, q, 0);
        for (size_t i = 0; i < b->n; i++) arg_str(c, b->claims[i].nonce);
        int rc = send_op(st, c, CB(on_lost_released), b);
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

static void enqueued_free(void *kept)
{
    enqueued_t *e = kept;
    rd_free(e->payload);
    rd_free(e->idempotency_key);
    rd_free(e);
}

int rd_store_enqueue(rd_store_t *st, rd_store_queue_t q, const char *payload, size_t len,
                     int max_retries, long long delay_ms, const char *idempotency_key,
                     rd_store_messages_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);
    call_t c;
    begin_op(&c, st, OP_ENQUEUE, q, 0);
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
    c.kept = e;
    c.kept_free = enqueued_free;
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                   const char *worker, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_CLAIM, q, 0);
    arg_int(&c, lease_ms < 0 ? -lease_ms : lease_ms);
    arg_int(&c, count);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease_ms < 0 ? "flag" : "request");
    arg_str(&c, worker ? worker : "");
    arg_nonce(&c, st);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_succeed(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                     rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_SUCCEED, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, st->succeeded_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
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
    begin_op(&c, st, OP_FAIL, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_error(&c, error);
    arg_str(&c, retryable ? "1" : "0");
    arg_int(&c, retry_after_ms < 0 ? -1 : retry_after_ms);
    arg_int(&c, st->dead_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_extend(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    long long lease_ms, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_EXTEND, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, lease_ms < 0 ? -lease_ms : lease_ms);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease_ms < 0 ? "flag" : "request");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_replay(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb,
                    void *arg)
{
    call_t c;
    begin_op(&c, st, OP_REPLAY, q, id);
    arg_int(&c, id);
    /* Hinted for the series' nudge; replay's reply carries no timer hint. */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_get(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_GET, q, id);
    arg_int(&c, id);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_list(rd_store_t *st, rd_store_queue_t q, const char *status, int limit,
                  const char *cursor, const char *error_contains, long long since_ms,
                  long long until_ms, rd_store_list_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_LIST, q, 0);
    arg_str(&c, status ? status : "");
    arg_int(&c, limit);
    arg_str(&c, cursor ? cursor : "");
    arg_str(&c, error_contains ? error_contains : "");
    if (since_ms >= 0) arg_int(&c, since_ms);
    else arg_str(&c, "");
    if (until_ms >= 0) arg_int(&c, until_ms);
    else arg_str(&c, "");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_succeed_many(rd_store_t *st, rd_store_queue_t q, size_t n, const long long *ids,
                          const char *const *tokens, rd_store_outcomes_cb cb, void *arg)
{
    if (n == 0 || n > RD_ACK_BATCH_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_SUCCEED_MANY, q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, ids[i]);
        arg_str(c, tokens[i] ? tokens[i] : "");
    }
    arg_int(c, st->succeeded_ttl_ms);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_settle_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                          const char *worker, size_t n, const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    if (n > RD_SETTLE_BATCH_MAX || count < 0 || count > RD_CLAIM_COUNT_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_SETTLE_CLAIM, q, 0);
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
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_release(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs,
                     rd_store_released_cb cb, void *arg)
{
    if (n == 0 || n > RD_CLAIM_COUNT_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_RELEASE, q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, msgs[i].id);
        arg_bytes(c, msgs[i].lease_token.ptr ? msgs[i].lease_token.ptr : "",
                  msgs[i].lease_token.len);
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

static void on_handed_back(const rd_store_released_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK)
        rd_warn("store: handing back messages of a departed client failed; their leases "
                "will expire instead");
}

void rd_store_hand_back(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs)
{
    for (size_t from = 0; from < n; from += RD_CLAIM_COUNT_MAX) {
        size_t batch = n - from < RD_CLAIM_COUNT_MAX ? n - from : RD_CLAIM_COUNT_MAX;
        if (rd_store_release(st, q, batch, msgs + from, on_handed_back, NULL) != 0)
            rd_warn("store: cannot hand back messages of a departed client now; their leases "
                    "will expire instead");
    }
}

int rd_store_replay_many(rd_store_t *st, rd_store_queue_t q, const char *mode,
                         const long long *ids, size_t n, int limit, const char *cursor,
                         const char *needle, rd_store_replayed_cb cb, void *arg)
{
    bool by_id = strcmp(mode, "ids") == 0;
    if (by_id && (n == 0 || n > RD_STORE_REPLAY_IDS_MAX)) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REPLAY_MANY, q, 0);
    arg_str(c, mode);
    if (by_id) {
        for (size_t i = 0; i < n; i++) arg_int(c, ids[i]);
    } else {
        arg_int(c, limit);
        arg_str(c, cursor ? cursor : "");
        if (needle) arg_str(c, needle);
    }
    /* Hinted for the series' nudge; its reply carries no timer hint. */
    int rc = send_op(st, c, CB(cb), arg);
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
    begin_op(&c, st, OP_DELETE, q, id);
    arg_int(&c, id);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_kill(rd_store_t *st, rd_store_queue_t q, long long id, const char *reason,
                  rd_store_messages_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_KILL, q, id);
    arg_int(&c, id);
    arg_str(&c, reason ? reason : "");
    arg_int(&c, st->dead_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_STATS, q, 0);
    arg_int(&c, top);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_tick(rd_store_t *st, rd_store_queue_t q, int limit, long long dead_ttl_ms,
                  long long succeeded_ttl_ms, rd_store_tick_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_TICK, q, 0);
    arg_int(&c, limit);
    arg_int(&c, dead_ttl_ms);
    arg_int(&c, succeeded_ttl_ms);
    arg_str(&c, "1");   /* a timer round: the promise and `empty` */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 0);  /* and `alerts` */
    arg_str(&c, st->series ? "1" : "0");   /* samples the time series */
    /* Queues without their own alert_url have a destination only in a fleet
     * with --alert-url (otherwise their ticks look at no stream). */
    arg_str(&c, st->alert_url || st->fleet_alert_url ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_SERIES, q, 0);
    arg_str(&c, resolution);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_queues_page(rd_store_t *st, const char *cursor, size_t cursor_len, int limit,
                         rd_store_page_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_QUEUES_PAGE, NO_QUEUE, 0);
    arg_bytes(&c, cursor ? cursor : "", cursor ? cursor_len : 0);
    arg_int(&c, limit);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_timer_take(rd_store_t *st, int limit, long long lease_ms, int sweep_batch,
                        long long sweep_every_ms, long long sweep_cycle_ms, rd_store_taken_cb cb,
                        void *arg)
{
    call_t c;
    begin_op(&c, st, OP_TIMER_TAKE, NO_QUEUE, 0);
    arg_int(&c, limit);
    arg_int(&c, lease_ms);
    arg_int(&c, sweep_batch);
    arg_int(&c, sweep_every_ms);
    arg_int(&c, sweep_cycle_ms);
    arg_str(&c, st->alert_url ? "1" : "0");  /* and the alert fields */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 1);  /* alert lease */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_timer_done(rd_store_t *st, long long token, const rd_timer_report_t *reports,
                        size_t n, rd_store_done_cb cb, void *arg)
{
    if (n == 0 || n > RD_STORE_REPORTS_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_TIMER_DONE, NO_QUEUE, 0);
    arg_int(c, token);
    for (size_t i = 0; i < n; i++) {
        arg_bytes(c, reports[i].queue.name, reports[i].queue.len);
        arg_int(c, reports[i].next_in_ms < 0 ? -1 : reports[i].next_in_ms);
        arg_str(c, reports[i].empty ? "1"
                   : reports[i].alerts == RD_TIMER_ALERTS_HANDOFF ? "a"
                   : reports[i].alerts == RD_TIMER_ALERTS_NONE ? "n" : "0");
    }
    int rc = send_op(st, c, CB(cb), arg);
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

static bool str_is(rd_str_t s, const char *z)
{
    return s.ptr && s.len == strlen(z) && memcmp(s.ptr, z, s.len) == 0;
}

static void on_config(const rd_store_strings_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK) {
        rd_debug("store: cannot read Redis's CONFIG; durability not checked");
        return;
    }
    for (size_t i = 0; i + 1 < res->count; i += 2) {
        rd_str_t name = res->strings[i], value = res->strings[i + 1];
        if (value.ptr == NULL) continue;
        if (str_is(name, "appendonly") && !str_is(value, "yes"))
            rd_warn("durability: Redis runs without AOF (appendonly no): a Redis crash loses "
                    "every message since the last snapshot; see docs/durability.md");
        else if (str_is(name, "appendfsync") && str_is(value, "no"))
            rd_warn("durability: appendfsync no: a machine crash can lose ~30 s of messages");
        else if (str_is(name, "maxmemory-policy") && !str_is(value, "noeviction"))
            rd_warn("durability: maxmemory-policy is %.*s: under memory pressure Redis may "
                    "evict message keys; use noeviction", (int)value.len, value.ptr);
    }
}

void rd_store_check_durability(rd_store_t *st)
{
    static const char *const patterns[] = { "ap*", "maxmemory-policy" };
    for (size_t i = 0; i < 2; i++) {
        call_t c;
        begin_op(&c, st, OP_CONFIG_GET, NO_QUEUE, 0);
        arg_str(&c, "GET");
        arg_str(&c, patterns[i]);
        send_op(st, &c, CB(on_config), NULL);
    }
}

int rd_store_policy_get(rd_store_t *st, rd_store_queue_t q, rd_store_policy_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_POLICY_GET, q, 0);
    return send_op(st, &c, CB(cb), arg);
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
    begin_op(&c, st, OP_POLICY_SET, q, 0);
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
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_pause(rd_store_t *st, rd_store_queue_t q, bool paused, rd_store_policy_cb cb,
                   void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);
    call_t c;
    begin_op(&c, st, OP_PAUSE, q, 0);
    arg_str(&c, paused ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_ping(rd_store_t *st, rd_store_status_cb cb, void *arg)
{
    call_t c;
    begin_op(&c, st, OP_PING, NO_QUEUE, 0);
    return send_op(st, &c, CB(cb), arg);
}

/* ---------------------------------------------------------------- alerts */

int rd_store_alerts_take(rd_store_t *st, rd_store_queue_t q, const char *consumer, int count,
                         long long min_idle_ms, bool alert_url, rd_store_alerts_taken_cb cb,
                         void *arg)
{
    call_t c;
    begin_op(&c, st, OP_ALERTS_TAKE, q, 0);
    arg_str(&c, consumer);
    arg_int(&c, count);
    arg_int(&c, min_idle_ms);
    arg_str(&c, alert_url ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_alerts_ack(rd_store_t *st, rd_store_queue_t q, size_t n, const char *const *sids,
                        rd_store_count_cb cb, void *arg)
{
    if (n == 0 || n + 4 > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_ALERTS_ACK, q, 0);
    for (size_t i = 0; i < n; i++) arg_str(c, sids[i]);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_alerts_touch(rd_store_t *st, rd_store_queue_t q, const char *consumer,
                          long long failures, size_t n, const char *const *sids,
                          rd_store_strings_cb cb, void *arg)
{
    if (n + 6 > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_ALERTS_TOUCH, q, 0);
    arg_str(c, consumer);
    arg_int(c, failures);
    for (size_t i = 0; i < n; i++) arg_str(c, sids[i]);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

/* ---------------------------------------------------------------- redrive */

int rd_store_redrive_take(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                          const char *mode, const long long *ids, size_t n, int limit,
                          const char *cursor, const char *needle,
                          rd_store_redrive_taken_cb cb, void *arg)
{
    bool by_id = strcmp(mode, "ids") == 0;
    if (by_id && n > RD_STORE_REPLAY_IDS_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REDRIVE_TAKE, source, 0);
    arg_bytes(c, target.name, target.len);
    arg_str(c, mode);
    if (by_id) {
        for (size_t i = 0; i < n; i++) arg_int(c, ids[i]);
    } else {
        arg_int(c, limit);
        arg_str(c, cursor ? cursor : "");
        if (needle) arg_str(c, needle);
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_redrive_in(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                        size_t n, const rd_store_letter_t *letters, rd_store_ids_cb cb,
                        void *arg)
{
    if (5 + 3 * n > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REDRIVE_IN, target, 0);
    arg_bytes(c, source.name, source.len);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, letters[i].id);
        arg_int(c, letters[i].max_retries);
        arg_bytes(c, letters[i].payload.ptr, letters[i].payload.len);
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_redrive_done(rd_store_t *st, rd_store_queue_t source, size_t n,
                          const long long *ids, const long long *new_ids, rd_store_count_cb cb,
                          void *arg)
{
    if (4 + 2 * n > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REDRIVE_DONE, source, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, ids[i]);
        arg_int(c, new_ids[i]);
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_redrive_forget(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                            size_t n, const long long *ids, rd_store_count_cb cb, void *arg)
{
    if (5 + n > MAX_ARGS) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REDRIVE_FORGET, target, 0);
    arg_bytes(c, source.name, source.len);
    for (size_t i = 0; i < n; i++) arg_int(c, ids[i]);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}
