/* store.c - queue operations as FCALLs of the retryd library, and their replies. */
#include "retryd/store.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/backend.h"
#include "retryd/buf.h"
#include "retryd/keys.h"
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

/* A `register` that failed, to be sent again (rd_store_flush_owed). */
enum { OWED_MAX = 4096 };

typedef struct owed {
    char *name;
    size_t len;
    bool timed;                 /* with a timer hint due at due_ms (loop time) */
    uint64_t due_ms;
} owed_t;

struct rd_store {
    uv_loop_t *loop;
    rd_backend_t *redis;
    char *prefix;
    rd_buf_t registry_key;
    registry_slot_t registry[REGISTRY_SLOTS];
    long long dead_ttl_ms, succeeded_ttl_ms;   /* passed on for timer hints */
    owed_t *owed;
    size_t nowed;
    bool register_failing;      /* logged once per run of failures */
};

typedef enum reply_kind {
    KIND_MESSAGES, KIND_ENQUEUED, KIND_LIST, KIND_TICK, KIND_PING, KIND_OUTCOMES,
    KIND_COUNT,
    KIND_REPLAYED, KIND_PURGED, KIND_STATS, KIND_DELETED,
    KIND_SETTLED,               /* {"ok", {status...}, msg..., timer} */
    KIND_HINTED,                /* {"ok", msg..., timer} or an outcome without a hint */
    KIND_HINTED_OUTCOMES,       /* {code..., timer} */
    KIND_TAKE, KIND_DONE, KIND_PAGE
} reply_kind_t;

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
    rd_store_cb cb;
    void *arg;
    enqueued_t *enq;            /* KIND_ENQUEUED */
    rd_store_t *st;
    char *queue;                /* owned: where a timer hint goes (hinted kinds) */
    size_t queue_len;
    char what[48];              /* the function (or command) called, for the log */
} op_t;

rd_store_t *rd_store_new(uv_loop_t *loop, rd_backend_t *redis, const char *prefix)
{
    rd_store_t *st = rd_calloc(1, sizeof *st);
    st->loop = loop;
    st->redis = redis;
    st->prefix = rd_strdup(prefix);
    rd_keys_registry(&st->registry_key, prefix);
    return st;
}

void rd_store_free(rd_store_t *st)
{
    if (st == NULL) return;
    for (size_t i = 0; i < REGISTRY_SLOTS; i++) rd_free(st->registry[i].name);
    for (size_t i = 0; i < st->nowed; i++) rd_free(st->owed[i].name);
    rd_free(st->owed);
    rd_buf_free(&st->registry_key);
    rd_free(st->prefix);
    rd_free(st);
}

void rd_store_set_retention(rd_store_t *st, long long dead_ttl_ms, long long succeeded_ttl_ms)
{
    st->dead_ttl_ms = dead_ttl_ms;
    st->succeeded_ttl_ms = succeeded_ttl_ms;
}

bool rd_store_ready(const rd_store_t *st)
{
    return rd_backend_ready(st->redis);
}

rd_backend_t *rd_store_backend(const rd_store_t *st)
{
    return st->redis;
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

static bool parse_message(const rd_reply_t *flat, rd_message_t *m)
{
    rd_message_init(m);
    if (!is_array(flat, 2)) return false;
    size_t n = rd_reply_len(flat);
    if (n % 2 != 0) return false;
    for (size_t i = 0; i < n; i += 2) {
        size_t name_len, value_len;
        const char *name = rd_reply_str(rd_reply_at(flat, i), &name_len);
        const char *value = rd_reply_str(rd_reply_at(flat, i + 1), &value_len);
        if (name == NULL) return false;
        /* "id" comes as an integer reply, every hash value as a string. */
        if (name_len == 2 && memcmp(name, "id", 2) == 0) {
            if (!rd_reply_int(rd_reply_at(flat, i + 1), &m->id)) return false;
            continue;
        }
        if (value == NULL) return false;
        rd_message_set_field(m, name, name_len, value, value_len);
    }
    /* {"id", id} alone: an idempotent duplicate whose message was deleted. */
    return m->id > 0 && (m->status != RD_STATUS_UNKNOWN || n == 2);
}

/* Parses messages from reply elements [from, to) into res. */
static bool parse_messages(const rd_reply_t *reply, size_t from, size_t to,
                           rd_store_result_t *res)
{
    res->count = 0;
    if (!is_array(reply, from) || to > rd_reply_len(reply)) return false;
    size_t n = to;
    if (n == from) return true;
    res->messages = rd_calloc(n - from, sizeof *res->messages);
    for (size_t i = from; i < n; i++) {
        if (!parse_message(rd_reply_at(reply, i), &res->messages[res->count])) return false;
        res->count++;
    }
    return true;
}

static bool parse_outcome(const rd_reply_t *reply, rd_store_result_t *res)
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

/* A flat array of strings into a fresh rd_str_t array. */
static bool parse_strings(const rd_reply_t *r, rd_str_t **out, size_t *len);

/* settle_claim's {"ok", {status...}, message..., timer}. */
static bool parse_settled(const rd_reply_t *reply, rd_store_result_t *res)
{
    if (!is_array(reply, 3) || !rd_reply_is(rd_reply_at(reply, 0), "ok")) return false;
    size_t n = rd_reply_len(reply);
    if (!rd_reply_int(rd_reply_at(reply, n - 1), &res->timer_hint)) return false;
    if (!parse_strings(rd_reply_at(reply, 1), &res->outcomes, &res->settled)) return false;
    return parse_messages(reply, 2, n - 1, res);
}

static bool parse_strings(const rd_reply_t *r, rd_str_t **out, size_t *len)
{
    if (!is_array(r, 0)) return false;
    size_t n = rd_reply_len(r);
    *out = rd_calloc(n ? n : 1, sizeof **out);
    *len = n;
    for (size_t i = 0; i < n; i++) {
        (*out)[i].ptr = rd_reply_str(rd_reply_at(r, i), &(*out)[i].len);
        if ((*out)[i].ptr == NULL) return false;
    }
    return true;
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
        NUMBER(pending) NUMBER(ready) NUMBER(scheduled) NUMBER(processing)
        NUMBER(succeeded) NUMBER(dead) NUMBER(dead_last_24h)
#undef NUMBER
        if (len == 6 && memcmp(name, "totals", 6) == 0) {
            if (!parse_strings(v, &st->totals, &st->totals_len)) return false;
        } else if (len == 10 && memcmp(name, "top_errors", 10) == 0) {
            if (!parse_strings(v, &st->top_errors, &st->top_errors_len)) return false;
        }
    }
    return st->totals != NULL && st->top_errors != NULL;
}

/* {"ok", id, now, timer}: the message is what was sent, as the function
 * stored it. */
static bool parse_enqueued(const rd_reply_t *reply, const enqueued_t *e, rd_store_result_t *res)
{
    if (!parse_outcome(reply, res)) return false;
    if (res->status == RD_STORE_DUPLICATE)
        return parse_messages(reply, 1, rd_reply_len(reply), res);
    if (res->status != RD_STORE_OK) return false;
    long long id, now;
    if (rd_reply_len(reply) != 4 || !rd_reply_int(rd_reply_at(reply, 1), &id) ||
        !rd_reply_int(rd_reply_at(reply, 2), &now) ||
        !rd_reply_int(rd_reply_at(reply, 3), &res->timer_hint))
        return false;
    res->messages = rd_calloc(1, sizeof *res->messages);
    res->count = 1;
    rd_message_t *m = &res->messages[0];
    rd_message_init(m);
    m->id = id;
    m->status = RD_STATUS_PENDING;
    m->payload = (rd_str_t){ e->payload, e->payload_len };
    m->max_retries = e->max_retries;
    m->created_at_ms = m->updated_at_ms = now;
    if (e->delay_ms > 0) m->retry_after_ms = now + e->delay_ms;
    if (e->idempotency_key)
        m->idempotency_key = (rd_str_t){ e->idempotency_key, strlen(e->idempotency_key) };
    return true;
}

/* Names from reply elements [from, len) into res->names and res->count. */
static bool parse_names(const rd_reply_t *reply, size_t from, rd_store_result_t *res)
{
    size_t n = rd_reply_len(reply);
    res->names = rd_calloc(n > from ? n - from : 1, sizeof *res->names);
    res->count = 0;
    for (size_t i = from; i < n; i++) {
        rd_str_t *s = &res->names[res->count++];
        s->ptr = rd_reply_str(rd_reply_at(reply, i), &s->len);
        if (s->ptr == NULL) return false;
    }
    return true;
}

static bool parse_reply(reply_kind_t kind, const rd_reply_t *reply, rd_store_result_t *res)
{
    switch (kind) {
    case KIND_ENQUEUED:
        return false;  /* parsed by parse_enqueued, which needs the op */
    case KIND_PING:
        return rd_reply_is(reply, "PONG");
    case KIND_TICK: {
        long long empty;
        if (!(rd_reply_len(reply) == 6 && rd_reply_int(rd_reply_at(reply, 0), &res->promoted) &&
              rd_reply_int(rd_reply_at(reply, 1), &res->reclaimed) &&
              rd_reply_int(rd_reply_at(reply, 2), &res->expired) &&
              rd_reply_int(rd_reply_at(reply, 3), &res->next_in_ms) &&
              rd_reply_int(rd_reply_at(reply, 4), &res->ready) &&
              rd_reply_int(rd_reply_at(reply, 5), &empty)))
            return false;
        res->empty = empty == 1;
        return true;
    }
    case KIND_TAKE:     /* {token, next_in_ms, name...} */
        return rd_reply_type(reply) == RD_REPLY_ARRAY && rd_reply_len(reply) >= 2 &&
               rd_reply_int(rd_reply_at(reply, 0), &res->token) &&
               rd_reply_int(rd_reply_at(reply, 1), &res->next_in_ms) &&
               parse_names(reply, 2, res);
    case KIND_PAGE:     /* {total, next_cursor, name...} */
        if (rd_reply_type(reply) != RD_REPLY_ARRAY || rd_reply_len(reply) < 2 ||
            !rd_reply_int(rd_reply_at(reply, 0), &res->total))
            return false;
        res->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 1), &res->next_cursor.len);
        return res->next_cursor.ptr != NULL && parse_names(reply, 2, res);
    case KIND_DONE:
        return rd_reply_int(reply, &res->total);
    case KIND_HINTED: {
        if (!parse_outcome(reply, res)) return false;
        if (res->status != RD_STORE_OK) return true;
        size_t n = rd_reply_len(reply);
        return n >= 2 && rd_reply_int(rd_reply_at(reply, n - 1), &res->timer_hint) &&
               parse_messages(reply, 1, n - 1, res);
    }
    case KIND_HINTED_OUTCOMES: {
        size_t n = rd_reply_len(reply);
        if (rd_reply_type(reply) != RD_REPLY_ARRAY || n < 1 ||
            !rd_reply_int(rd_reply_at(reply, n - 1), &res->timer_hint))
            return false;
        res->outcomes = rd_calloc(n, sizeof *res->outcomes);
        for (size_t i = 0; i + 1 < n; i++) {
            res->outcomes[i].ptr = rd_reply_str(rd_reply_at(reply, i), &res->outcomes[i].len);
            if (res->outcomes[i].ptr == NULL) return false;
        }
        res->count = n - 1;
        return true;
    }
    case KIND_COUNT:
        return rd_reply_int(reply, &res->released);
    case KIND_STATS:
        return parse_stats(reply, &res->stats);
    case KIND_DELETED:
        return parse_outcome(reply, res);
    case KIND_REPLAYED:
        if (!is_array(reply, 1)) return false;
        if (rd_reply_is(rd_reply_at(reply, 0), "bad_cursor")) {
            res->status = RD_STORE_BAD_CURSOR;
            return true;
        }
        if (rd_reply_len(reply) != 2 || !rd_reply_int(rd_reply_at(reply, 0), &res->replayed))
            return false;
        res->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 1), &res->next_cursor.len);
        return res->next_cursor.ptr != NULL;
    case KIND_PURGED: {
        long long more;
        if (!is_array(reply, 2) || rd_reply_len(reply) != 2 ||
            !rd_reply_int(rd_reply_at(reply, 0), &res->purged) ||
            !rd_reply_int(rd_reply_at(reply, 1), &more))
            return false;
        res->next_cursor.ptr = more ? "more" : "";
        res->next_cursor.len = more ? 4 : 0;
        return true;
    }
    case KIND_OUTCOMES: {
        if (!is_array(reply, 0)) return false;
        size_t n = rd_reply_len(reply);
        res->outcomes = rd_calloc(n ? n : 1, sizeof *res->outcomes);
        for (size_t i = 0; i < n; i++) {
            res->outcomes[i].ptr = rd_reply_str(rd_reply_at(reply, i), &res->outcomes[i].len);
            if (res->outcomes[i].ptr == NULL) return false;
        }
        res->count = n;
        return true;
    }
    case KIND_SETTLED:
        return parse_settled(reply, res);
    case KIND_MESSAGES:
        if (!parse_outcome(reply, res)) return false;
        if (res->status != RD_STORE_OK && res->status != RD_STORE_DUPLICATE) return true;
        return parse_messages(reply, 1, rd_reply_len(reply), res);
    case KIND_LIST:
        if (!parse_outcome(reply, res)) return false;
        if (res->status != RD_STORE_OK) return true;
        if (!is_array(reply, 3) || !rd_reply_int(rd_reply_at(reply, 1), &res->total))
            return false;
        res->next_cursor.ptr = rd_reply_str(rd_reply_at(reply, 2), &res->next_cursor.len);
        return res->next_cursor.ptr != NULL &&
               parse_messages(reply, 3, rd_reply_len(reply), res);
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

static void free_result(rd_store_result_t *res)
{
    rd_free(res->messages);
    rd_free(res->names);
    rd_free(res->outcomes);
    rd_free(res->stats.totals);
    rd_free(res->stats.top_errors);
}

static void send_register(rd_store_t *st, const char *name, size_t len, long long in_ms);

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

static void on_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    op_t *op = arg;
    rd_store_result_t res;
    memset(&res, 0, sizeof res);
    res.timer_hint = -1;
    char detail[160];
    if (status == RD_REDIS_LOST) {
        /* A read has no outcome to be unsure of: it simply was not done. */
        res.status = op->read_only ? RD_STORE_UNAVAILABLE : RD_STORE_LOST;
    } else if (status == RD_REDIS_NOT_SENT) {
        res.status = RD_STORE_UNAVAILABLE;
    } else if (rd_reply_type(reply) == RD_REPLY_ERROR) {
        res.status = RD_STORE_ERROR;
        res.detail.ptr = rd_reply_str(reply, &res.detail.len);
    } else if (op->kind == KIND_ENQUEUED ? !parse_enqueued(reply, op->enq, &res)
                                         : !parse_reply(op->kind, reply, &res)) {
        char got[64];
        describe_reply(reply, got, sizeof got);
        free_result(&res);
        memset(&res, 0, sizeof res);
        res.status = RD_STORE_ERROR;
        snprintf(detail, sizeof detail, "unexpected reply to %s: %s", op->what, got);
        rd_error("store: %s (another version of the library?)", detail);
        res.detail.ptr = detail;
        res.detail.len = strlen(detail);
        res.timer_hint = -1;
    }
    /* The hint goes to the schedule before anyone hears of the new work. An
     * enqueue that got id 1 may follow a round that found the queue without
     * keys and is removing it from the registry: it registers again
     * whatever this process remembers (docs/design.md, "Leaving the
     * registry"). */
    if (op->queue && res.status == RD_STORE_OK) {
        bool first = op->kind == KIND_ENQUEUED && res.count == 1 && res.messages[0].id == 1;
        if (first || res.timer_hint >= 0)
            send_register(op->st, op->queue, op->queue_len, res.timer_hint);
    }
    op->cb(&res, op->arg);
    free_result(&res);
    free_op(op);
}

/* ---------------------------------------------------------------- calls */

/* FCALL name numkeys base, then at most 100 (id, token) pairs, a mode and
 * RD_STORE_REPLAY_IDS_MAX ids, or settle_claim's 3 + 6 per settlement + 2. */
enum { MAX_ARGS = 10 + 6 * 100 };
_Static_assert(5 + 3 * RD_STORE_REPORTS_MAX <= MAX_ARGS, "timer_done's reports fit a call");

typedef struct call {
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char numbers[MAX_ARGS][24];     /* storage for formatted integers */
    char fn[48];                    /* the versioned function name */
    rd_buf_t base, mkey;
} call_t;

/* Not a memset: the argument arrays are large and filled as they are used. */
static void call_init(call_t *c)
{
    c->argc = 0;
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
    return false;
}

/* Takes ownership of enq (NULL for every kind but KIND_ENQUEUED); hint_q (or
 * NULL) is the queue a timer hint in the reply goes to (copied). */
static int send_call_with(rd_store_t *st, call_t *c, reply_kind_t kind, enqueued_t *enq,
                          const rd_store_queue_t *hint_q, rd_store_cb cb, void *arg)
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
    /* FCALL/FCALL_RO name the function second; other commands are their own name. */
    int named = c->argc > 1 && strncmp(c->argv[0], "FCALL", 5) == 0 ? 1 : 0;
    snprintf(op->what, sizeof op->what, "%.*s", (int)c->lens[named], c->argv[named]);
    int rc = rd_backend_command(st->redis, c->argc, c->argv, c->lens, on_reply, op);
    if (rc != 0) free_op(op);
    rd_buf_free(&c->base);
    rd_buf_free(&c->mkey);
    return rc;
}

static int send_call(rd_store_t *st, call_t *c, reply_kind_t kind, rd_store_cb cb, void *arg)
{
    return send_call_with(st, c, kind, NULL, NULL, cb, arg);
}

/* A call whose reply may carry a timer hint for q. */
static int send_hinted(rd_store_t *st, call_t *c, reply_kind_t kind, rd_store_queue_t q,
                       rd_store_cb cb, void *arg)
{
    return send_call_with(st, c, kind, NULL, &q, cb, arg);
}

/* ---------------------------------------------------------------- registry */

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static registry_slot_t *registry_slot(rd_store_t *st, const char *name, size_t len)
{
    return &st->registry[fnv1a(name, len) % REGISTRY_SLOTS];
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

void rd_store_schedule(rd_store_t *st, rd_store_queue_t q, long long in_ms)
{
    send_register(st, q.name, q.len, in_ms);
}

void rd_store_flush_owed(rd_store_t *st)
{
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
                     rd_store_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    register_queue(st, q);
    call_t c;
    begin_fcall(&c, st, "enqueue", q, 0);
    arg_bytes(&c, payload, len);
    arg_int(&c, max_retries);
    arg_int(&c, delay_ms);
    arg_str(&c, idempotency_key ? idempotency_key : "");
    arg_str(&c, "1");   /* this caller forwards timer hints */
    enqueued_t *e = rd_malloc(sizeof *e);
    e->payload = rd_strndup(payload, len);
    e->payload_len = len;
    e->idempotency_key = idempotency_key ? rd_strdup(idempotency_key) : NULL;
    e->max_retries = max_retries;
    e->delay_ms = delay_ms;
    return send_call_with(st, &c, KIND_ENQUEUED, e, &q, cb, arg);
}

int rd_store_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                   rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "claim", q, 0);
    arg_int(&c, lease_ms);
    arg_int(&c, count);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    return send_hinted(st, &c, KIND_HINTED, q, cb, arg);
}

int rd_store_succeed(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                     rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "succeed", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, st->succeeded_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, cb, arg);
}

int rd_store_fail(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                  const char *error, bool retryable, long long retry_after_ms,
                  rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "fail", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_str(&c, error);
    arg_str(&c, retryable ? "1" : "0");
    arg_int(&c, retry_after_ms < 0 ? -1 : retry_after_ms);
    arg_int(&c, st->dead_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, cb, arg);
}

int rd_store_extend(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    long long lease_ms, rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "extend", q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, lease_ms);
    return send_call(st, &c, KIND_MESSAGES, cb, arg);
}

int rd_store_replay(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_cb cb,
                    void *arg)
{
    call_t c;
    begin_fcall(&c, st, "replay", q, id);
    arg_int(&c, id);
    return send_call(st, &c, KIND_MESSAGES, cb, arg);
}

int rd_store_get(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "get", q, id);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_int(&c, id);
    return send_call(st, &c, KIND_MESSAGES, cb, arg);
}

int rd_store_list(rd_store_t *st, rd_store_queue_t q, const char *status, int limit,
                  const char *cursor, const char *error_contains, long long since_ms,
                  long long until_ms, rd_store_cb cb, void *arg)
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
    return send_call(st, &c, KIND_LIST, cb, arg);
}

int rd_store_succeed_many(rd_store_t *st, rd_store_queue_t q, size_t n, const long long *ids,
                          const char *const *tokens, rd_store_cb cb, void *arg)
{
    if (n == 0 || n > 100) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "succeed_many", q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, ids[i]);
        arg_str(c, tokens[i] ? tokens[i] : "");
    }
    arg_int(c, st->succeeded_ttl_ms);
    int rc = send_hinted(st, c, KIND_HINTED_OUTCOMES, q, cb, arg);
    rd_free(c);
    return rc;
}

int rd_store_settle_claim(rd_store_t *st, rd_store_queue_t q, long long lease_ms, int count,
                          size_t n, const rd_settlement_t *items, rd_store_cb cb, void *arg)
{
    if (n > 100 || count < 0 || count > 100) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "settle_claim", q, 0);
    arg_int(c, lease_ms);
    arg_int(c, count);
    arg_int(c, (long long)n);
    for (size_t i = 0; i < n; i++) {
        const rd_settlement_t *s = &items[i];
        arg_int(c, s->id);
        arg_str(c, s->lease_token ? s->lease_token : "");
        arg_str(c, s->failed ? "failed" : "succeeded");
        arg_str(c, s->failed && s->error ? s->error : "");
        arg_str(c, s->retryable ? "1" : "0");
        arg_int(c, s->failed && s->retry_after_ms >= 0 ? s->retry_after_ms : -1);
    }
    arg_int(c, st->dead_ttl_ms);        /* asks for the timer hint */
    arg_int(c, st->succeeded_ttl_ms);
    int rc = send_hinted(st, c, KIND_SETTLED, q, cb, arg);
    rd_free(c);
    return rc;
}

int rd_store_release(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs,
                     rd_store_cb cb, void *arg)
{
    if (n == 0 || n > 100) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_fcall(c, st, "release", q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, msgs[i].id);
        arg_bytes(c, msgs[i].lease_token.ptr ? msgs[i].lease_token.ptr : "",
                  msgs[i].lease_token.len);
    }
    int rc = send_call(st, c, KIND_COUNT, cb, arg);
    rd_free(c);
    return rc;
}

static void on_handed_back(const rd_store_result_t *res, void *arg)
{
    (void)arg;
    if (res->status != RD_STORE_OK)
        rd_warn("store: handing back messages of a departed client failed; their leases "
                "will expire instead");
}

void rd_store_hand_back(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs)
{
    for (size_t from = 0; from < n; from += 100) {
        size_t batch = n - from < 100 ? n - from : 100;
        if (rd_store_release(st, q, batch, msgs + from, on_handed_back, NULL) != 0)
            rd_warn("store: cannot hand back messages of a departed client now; their leases "
                    "will expire instead");
    }
}

int rd_store_replay_many(rd_store_t *st, rd_store_queue_t q, const char *mode,
                         const long long *ids, size_t n, int limit, const char *cursor,
                         const char *needle, rd_store_cb cb, void *arg)
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
    int rc = send_call(st, c, KIND_REPLAYED, cb, arg);
    rd_free(c);
    return rc;
}

int rd_store_delete(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_cb cb,
                    void *arg)
{
    call_t c;
    begin_fcall(&c, st, "delete", q, id);
    arg_int(&c, id);
    return send_call(st, &c, KIND_DELETED, cb, arg);
}

int rd_store_kill(rd_store_t *st, rd_store_queue_t q, long long id, const char *reason,
                  rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "kill", q, id);
    arg_int(&c, id);
    arg_str(&c, reason ? reason : "");
    arg_int(&c, st->dead_ttl_ms);
    return send_hinted(st, &c, KIND_HINTED, q, cb, arg);
}

int rd_store_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "stats", q, 0);
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_int(&c, top);
    return send_call(st, &c, KIND_STATS, cb, arg);
}

int rd_store_tick(rd_store_t *st, rd_store_queue_t q, int limit, long long dead_ttl_ms,
                  long long succeeded_ttl_ms, rd_store_cb cb, void *arg)
{
    call_t c;
    begin_fcall(&c, st, "tick", q, 0);
    arg_int(&c, limit);
    arg_int(&c, dead_ttl_ms);
    arg_int(&c, succeeded_ttl_ms);
    arg_str(&c, "1");   /* a timer round: the promise and `empty` */
    return send_call(st, &c, KIND_TICK, cb, arg);
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
                         rd_store_cb cb, void *arg)
{
    call_t c;
    begin_registry_fcall(&c, st, "queues_page");
    c.argv[0] = "FCALL_RO";
    c.lens[0] = 8;
    arg_bytes(&c, cursor ? cursor : "", cursor ? cursor_len : 0);
    arg_int(&c, limit);
    return send_call(st, &c, KIND_PAGE, cb, arg);
}

int rd_store_timer_take(rd_store_t *st, int limit, long long lease_ms, int sweep_batch,
                        long long sweep_every_ms, long long sweep_cycle_ms, rd_store_cb cb,
                        void *arg)
{
    call_t c;
    begin_registry_fcall(&c, st, "timer_take");
    arg_int(&c, limit);
    arg_int(&c, lease_ms);
    arg_int(&c, sweep_batch);
    arg_int(&c, sweep_every_ms);
    arg_int(&c, sweep_cycle_ms);
    return send_call(st, &c, KIND_TAKE, cb, arg);
}

int rd_store_timer_done(rd_store_t *st, long long token, const rd_timer_report_t *reports,
                        size_t n, rd_store_cb cb, void *arg)
{
    if (n == 0 || n > RD_STORE_REPORTS_MAX) return -1;
    call_t *c = rd_malloc(sizeof *c);
    begin_registry_fcall(c, st, "timer_done");
    arg_int(c, token);
    for (size_t i = 0; i < n; i++) {
        arg_bytes(c, reports[i].queue.name, reports[i].queue.len);
        arg_int(c, reports[i].next_in_ms < 0 ? -1 : reports[i].next_in_ms);
        arg_str(c, reports[i].empty ? "1" : "0");
    }
    int rc = send_call(st, c, KIND_DONE, cb, arg);
    rd_free(c);
    return rc;
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

int rd_store_ping(rd_store_t *st, rd_store_cb cb, void *arg)
{
    call_t c;
    call_init(&c);
    arg_str(&c, "PING");
    return send_call(st, &c, KIND_PING, cb, arg);
}
