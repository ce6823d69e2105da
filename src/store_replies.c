/* store_replies.c - the store's reply parsers: each row's reply turned into
 * its typed result (store.h), and what frees it. A reply of another shape
 * (another version of the library, a hand-loaded one) fails the parse; it
 * never indexes past what is there. Only store.c calls these. */
#include "retryd/store_replies.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/policy.h"

/* ---------------------------------------------------------------- shapes */

/* The one shape check every parser below makes before it reads an element:
 * r is an array of at least min_len elements. A reply of another shape (from
 * another version of the library, or a hand-loaded one) then fails the parse,
 * which answers RD_STORE_ERROR, never indexes past what is there. */
static bool is_array(const rd_reply_t *r, size_t min_len)
{
    return rd_reply_type(r) == RD_REPLY_ARRAY && rd_reply_len(r) >= min_len;
}

/* The name, value pairs of flat from element `from` on into m. */
static bool parse_fields_into(const rd_reply_t *flat, size_t from, rd_message_t *m)
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
            /* The one array among the values: its strings, for the JSON. */
            const rd_reply_t *h = rd_reply_at(flat, i + 1);
            if (rd_reply_type(h) != RD_REPLY_ARRAY || m->history) return false;
            size_t len = rd_reply_len(h);
            rd_str_t *strs = rd_calloc(len ? len : 1, sizeof *strs);
            for (size_t j = 0; j < len; j++)
                strs[j].ptr = rd_reply_str(rd_reply_at(h, j), &strs[j].len);
            m->history = strs;
            m->history_len = len;
            continue;
        }
        if (value == NULL) return false;
        rd_message_set_field(m, name, name_len, value, value_len);
    }
    return true;
}

/* Frees what a parse allocated in m (its history's array). */
static void message_drop(rd_message_t *m)
{
    rd_free((rd_str_t *)m->history);
    m->history = NULL;
    m->history_len = 0;
}

/* The name, value pairs of flat from element `from` on into m; on false m
 * holds nothing to free. */
static bool parse_fields(const rd_reply_t *flat, size_t from, rd_message_t *m)
{
    if (parse_fields_into(flat, from, m)) return true;
    message_drop(m);
    return false;
}

static void free_messages_of(rd_message_t *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) message_drop(&msgs[i]);
    rd_free(msgs);
}

/* A message as {"id", id, field, value, ...} (reply_message in the library). */
static bool parse_message(const rd_reply_t *flat, rd_message_t *m)
{
    rd_message_init(m);
    if (!is_array(flat, 2) || !parse_fields(flat, 0, m)) return false;
    /* {"id", id} alone: an idempotent duplicate whose message was deleted. */
    if (m->id > 0 && (m->status != RD_STATUS_UNKNOWN || rd_reply_len(flat) == 2)) return true;
    message_drop(m);
    return false;
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
    if (!parse_fields(r, LEASED_HEAD, m)) return false;
    if (m->id > 0) return true;
    message_drop(m);
    return false;
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
    else if (rd_reply_is(code, "too_large")) res->status = RD_STORE_TOO_LARGE;
    else if (rd_reply_is(code, "reshard")) res->status = RD_STORE_RESHARD;
    else if (rd_reply_is(code, "copy")) res->status = RD_STORE_COPY;
    else if (rd_reply_is(code, "moved")) res->status = RD_STORE_MOVED;
    else if (rd_reply_is(code, "full")) res->status = RD_STORE_FULL;
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
    res->policy_wait_ms = -1;
    res->queue_known = true;
    /* A claim that leased nothing: {"ok", {status...}, timer, wait_ms, known}. */
    if (n == 5 && rd_reply_type(rd_reply_at(reply, 2)) == RD_REPLY_INTEGER) {
        long long known;
        if (!rd_reply_int(rd_reply_at(reply, 3), &res->policy_wait_ms) ||
            !rd_reply_int(rd_reply_at(reply, 4), &known))
            return false;
        res->queue_known = known >= 1;
        res->sharded = known == 2;
        n -= 2;
    }
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
 * or {"invalid", field, why} (the daemon checks first, so an error), or
 * {"limited", field, why}: a limit refused on a sharded queue. */
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
        if (rd_reply_is(rd_reply_at(reply, 0), "limited") && n == 3) {   /* {"limited", field, why} */
            res->head.status = RD_STORE_INVALID_STATE;
            res->head.detail.ptr = rd_reply_str(rd_reply_at(reply, 2), &res->head.detail.len);
            return res->head.detail.ptr != NULL;
        }
        res->created = rd_reply_is(rd_reply_at(reply, 0), "created");
        if (!res->created && !rd_reply_is(rd_reply_at(reply, 0), "ok") &&
            !rd_reply_is(rd_reply_at(reply, 0), "exists"))
            return false;
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

/* {"ok", id, now, timer, max_retries, expires_at or -1} (the daemon's
 * ARGV, lua/10_enqueue.lua): the message is what was sent, as the function
 * stored it, with the retries and the expiry the function chose (the
 * policy's when the request gave none). The shorter {"ok", id, now, timer[,
 * max_retries]} of the older ARGV are read too. */
static bool parse_enqueued(const rd_reply_t *reply, const rd_store_enqueued_t *e, rd_store_messages_t *res,
                           long long *hint)
{
    if (!parse_outcome(reply, &res->head)) return false;
    if (res->head.status == RD_STORE_DUPLICATE)
        return parse_messages(reply, 1, rd_reply_len(reply), &res->messages, &res->count);
    if (res->head.status == RD_STORE_TOO_LARGE)   /* {"too_large", limit} */
        return rd_reply_int(rd_reply_at(reply, 1), &res->payload_limit);
    if (res->head.status == RD_STORE_NOT_FOUND) return rd_reply_len(reply) == 1;   /* flag e */
    if (res->head.status == RD_STORE_INVALID_STATE) return true;   /* flag c: state named */
    if (res->head.status == RD_STORE_RESHARD || res->head.status == RD_STORE_COPY ||
        res->head.status == RD_STORE_MOVED || res->head.status == RD_STORE_FULL)
        return rd_reply_len(reply) == 1;
    if (res->head.status != RD_STORE_OK) return false;
    long long id, now;
    long long max_retries = e->max_retries, expires_at = -1;
    long long retry_after = e->delay_ms > 0 ? -2 : -1;   /* -2: now + delay_ms; n == 7: the
                                                            policy's delay */
    size_t n = rd_reply_len(reply);
    if (n < 4 || n > 7 || !rd_reply_int(rd_reply_at(reply, 1), &id) ||
        !rd_reply_int(rd_reply_at(reply, 2), &now) ||
        !rd_reply_int(rd_reply_at(reply, 3), hint) ||
        (n >= 5 && !rd_reply_int(rd_reply_at(reply, 4), &max_retries)) ||
        (n >= 6 && !rd_reply_int(rd_reply_at(reply, 5), &expires_at)) ||
        (n == 7 && !rd_reply_int(rd_reply_at(reply, 6), &retry_after)))
        return false;
    res->messages = rd_calloc(1, sizeof *res->messages);
    res->count = 1;
    rd_message_t *m = &res->messages[0];
    rd_message_init(m);
    m->id = id;
    m->status = RD_STATUS_PENDING;
    m->payload = (rd_str_t){ e->payload, e->payload_len };
    m->max_retries = (int)max_retries;
    m->priority = e->priority;
    m->expires_at_ms = expires_at;
    m->created_at_ms = m->updated_at_ms = now;
    m->retry_after_ms = retry_after == -2 ? now + e->delay_ms : retry_after;
    if (e->idempotency_key)
        m->idempotency_key = (rd_str_t){ e->idempotency_key, strlen(e->idempotency_key) };
    if (e->group) m->group = (rd_str_t){ e->group, strlen(e->group) };
    if (e->attributes) m->attributes = (rd_str_t){ e->attributes, e->attributes_len };
    return true;
}



/* ---------------------------------------------------------------- the rows' parsers */

/* Each is a row's parse (op_def_t): reply -> its typed result. */

bool rd_store_parse_enqueue(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    return parse_enqueued(r, kept, res, hint);
}

/* enqueue_many: {timer, reply...}, each reply as enqueue's for its item; fewer
 * replies than items when the call stopped at its reply bytes. */
bool rd_store_parse_enqueue_many(const rd_reply_t *r, const void *kept, void *res,
                                 long long *hint)
{
    const rd_store_enqueued_many_kept_t *k = kept;
    rd_store_enqueued_many_t *m = res;
    /* A placement the caller's view is wrong for: the whole call refused. */
    if (is_array(r, 1) && rd_reply_len(r) == 1 && rd_reply_type(rd_reply_at(r, 0)) != RD_REPLY_INTEGER) {
        if (!parse_outcome(r, &m->head)) return false;
        return m->head.status == RD_STORE_RESHARD || m->head.status == RD_STORE_COPY;
    }
    if (!is_array(r, 2) || rd_reply_len(r) - 1 > k->n ||
        !rd_reply_int(rd_reply_at(r, 0), hint))
        return false;
    size_t n = rd_reply_len(r) - 1;
    m->items = rd_calloc(n, sizeof *m->items);
    m->count = n;   /* what rd_result_free_enqueued_many frees, also after a failed parse */
    for (size_t i = 0; i < n; i++) {
        long long item_hint = -1;   /* the call's hint is the first element */
        rd_store_messages_t *it = &m->items[i];
        if (!parse_enqueued(rd_reply_at(r, i + 1), &k->items[i], it, &item_hint)) return false;
        if (it->head.status == RD_STORE_OK && it->messages[0].id == 1) m->first = true;
    }
    return true;
}

/* get, replay: {"ok", msg} or an outcome. */
bool rd_store_parse_message(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_messages_t *m = res;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK && m->head.status != RD_STORE_DUPLICATE) return true;
    return parse_messages(r, 1, rd_reply_len(r), &m->messages, &m->count);
}

/* succeed, fail, extend, kill: {"ok", msg..., timer} or an outcome. */
bool rd_store_parse_hinted(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept;
    rd_store_messages_t *m = res;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK) return true;
    size_t n = rd_reply_len(r);
    return n >= 2 && rd_reply_int(rd_reply_at(r, n - 1), hint) &&
           parse_messages(r, 1, n - 1, &m->messages, &m->count);
}

/* claim: {"ok", leased..., timer[, retry_ms]}, and when it leased nothing
 * {"ok", timer, retry_ms, policy_wait_ms, known}; a library without the
 * policy answers no retry_ms. */
bool rd_store_parse_claim(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept;
    rd_store_messages_t *m = res;
    m->policy_wait_ms = -1;
    m->queue_known = true;
    if (!parse_outcome(r, &m->head)) return false;
    if (m->head.status != RD_STORE_OK) return true;
    size_t n = rd_reply_len(r);
    if (n == 5 && rd_reply_type(rd_reply_at(r, 1)) == RD_REPLY_INTEGER) {
        long long known;
        if (!rd_reply_int(rd_reply_at(r, 3), &m->policy_wait_ms) ||
            !rd_reply_int(rd_reply_at(r, 4), &known))
            return false;
        m->queue_known = known >= 1;
        m->sharded = known == 2;
        n -= 2;
    }
    if (n >= 3 && rd_reply_type(rd_reply_at(r, n - 2)) == RD_REPLY_INTEGER) {
        if (!rd_reply_int(rd_reply_at(r, n - 1), &m->retry_ms)) return false;
        n--;
    }
    return n >= 2 && rd_reply_int(rd_reply_at(r, n - 1), hint) &&
           parse_leased_messages(r, 1, n - 1, &m->messages, &m->count);
}

bool rd_store_parse_settle_claim(const rd_reply_t *r, const void *kept, void *res,
                                     long long *hint)
{
    (void)kept;
    return parse_settled(r, res, hint);
}

/* succeed_many: {code..., timer}. */
bool rd_store_parse_succeed_many(const rd_reply_t *r, const void *kept, void *res,
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

/* release, release_lost: how many were released. */
bool rd_store_parse_released(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_released_t *)res)->released);
}

/* replay_many: {replayed, next_cursor} or {"bad_cursor"}. */
bool rd_store_parse_replayed(const rd_reply_t *r, const void *kept, void *res, long long *hint)
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
bool rd_store_parse_outcome(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_outcome(r, res);
}

/* list: {"ok", total, next_cursor, msg...} or an outcome. */
bool rd_store_parse_list(const rd_reply_t *r, const void *kept, void *res, long long *hint)
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

bool rd_store_parse_stats(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_stats(r, &((rd_store_stats_result_t *)res)->stats);
}

bool rd_store_parse_series(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_series(r, res);
}

/* tick: {promoted, reclaimed, expired, next_in_ms, ready, empty, alerts, moving}. */
bool rd_store_parse_tick(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_tick_t *t = res;
    long long empty, alerts = 0;
    size_t n = rd_reply_len(r);
    t->shards = 1;   /* a sharded queue's tick adds its count */
    if (n == 9 && !rd_reply_int(rd_reply_at(r, 8), &t->shards)) return false;
    if (!((n == 8 || n == 9) && rd_reply_int(rd_reply_at(r, 6), &alerts) &&
          rd_reply_int(rd_reply_at(r, 7), &t->moving) &&
          rd_reply_int(rd_reply_at(r, 0), &t->promoted) &&
          rd_reply_int(rd_reply_at(r, 1), &t->reclaimed) &&
          rd_reply_int(rd_reply_at(r, 2), &t->expired) &&
          rd_reply_int(rd_reply_at(r, 3), &t->next_in_ms) &&
          rd_reply_int(rd_reply_at(r, 4), &t->ready) &&
          rd_reply_int(rd_reply_at(r, 5), &empty)))
        return false;
    t->empty = empty == 1;
    t->alerts = alerts == 1 || alerts == 2 ? (int)alerts : 0;
    t->alerts_checked = alerts >= 0;
    return true;
}

bool rd_store_parse_policy(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return parse_policy(r, res);
}

/* pause: 1 | 0, the pause as it is now. */
bool rd_store_parse_paused(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_policy_t *p = res;
    long long paused, shards = 1;
    /* 1 or 0; a sharded queue's {paused, shards} (its shards get copies) */
    if (rd_reply_type(r) == RD_REPLY_ARRAY) {
        if (rd_reply_len(r) != 2 || !rd_reply_int(rd_reply_at(r, 0), &paused) ||
            !rd_reply_int(rd_reply_at(r, 1), &shards))
            return false;
    } else if (!rd_reply_int(r, &paused)) {
        return false;
    }
    rd_policy_init(&p->policy);
    p->policy.paused = paused == 1;
    p->policy.shards = shards;
    return true;
}

/* alerts_take: {more, url, (stream_id, id, error, retry_count, at)...}. An
 * entry's fields are read as the sender always read them: a missing string
 * stays NULL, a number that is not one stays 0. */
bool rd_store_parse_alerts_take(const rd_reply_t *r, const void *kept, void *res,
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
bool rd_store_parse_count(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_count_t *)res)->n);
}

/* An array whose elements are read as strings where they are strings
 * (alerts_touch, CONFIG GET). */
bool rd_store_parse_strings(const rd_reply_t *r, const void *kept, void *res, long long *hint)
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

/* redrive_take: {resumed, next, {id, target, max_retries, payload, priority, history}...} or
 * {"bad_cursor"}. */
bool rd_store_parse_redrive_take(const rd_reply_t *r, const void *kept, void *res,
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
        if (!is_array(e, 6) || rd_reply_len(e) != 6 || !rd_reply_int(rd_reply_at(e, 0), &l->id) ||
            (l->target.ptr = rd_reply_str(rd_reply_at(e, 1), &l->target.len)) == NULL ||
            !rd_reply_int(rd_reply_at(e, 2), &l->max_retries) ||
            (l->payload.ptr = rd_reply_str(rd_reply_at(e, 3), &l->payload.len)) == NULL ||
            !rd_reply_int(rd_reply_at(e, 4), &l->priority) ||
            (l->history.ptr = rd_reply_str(rd_reply_at(e, 5), &l->history.len)) == NULL)
            return false;
        t->count = i + 1;
    }
    return true;
}

/* redrive_in: {new_id...}. */
bool rd_store_parse_ids(const rd_reply_t *r, const void *kept, void *res, long long *hint)
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
bool rd_store_parse_timer_take(const rd_reply_t *r, const void *kept, void *res,
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

bool rd_store_parse_timer_done(const rd_reply_t *r, const void *kept, void *res,
                                   long long *hint)
{
    (void)kept, (void)hint;
    return rd_reply_int(r, &((rd_store_done_t *)res)->left);
}

/* queues_page: {total, next_cursor, name...}. */
bool rd_store_parse_page(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_page_t *p = res;
    if (!is_array(r, 2) || !rd_reply_int(rd_reply_at(r, 0), &p->total)) return false;
    p->next_cursor.ptr = rd_reply_str(rd_reply_at(r, 1), &p->next_cursor.len);
    return p->next_cursor.ptr != NULL && parse_strings_from(r, 2, &p->names, &p->count);
}

/* groups: {"ok", next_cursor, (group, pending, processing)...}. */
bool rd_store_parse_groups(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_groups_t *g = res;
    if (!parse_outcome(r, &g->head)) return false;
    if (g->head.status != RD_STORE_OK) return true;   /* {"reshard"}: the view is wrong */
    size_t len = rd_reply_len(r);
    if (!is_array(r, 2) || (len - 2) % 3 != 0) return false;
    g->next_cursor.ptr = rd_reply_str(rd_reply_at(r, 1), &g->next_cursor.len);
    if (g->next_cursor.ptr == NULL) return false;
    size_t n = (len - 2) / 3;
    g->groups = rd_calloc(n ? n : 1, sizeof *g->groups);
    for (size_t i = 0; i < n; i++) {
        rd_store_group_t *e = &g->groups[i];
        size_t at = 2 + 3 * i;
        e->name.ptr = rd_reply_str(rd_reply_at(r, at), &e->name.len);
        if (e->name.ptr == NULL || !rd_reply_int(rd_reply_at(r, at + 1), &e->pending) ||
            !rd_reply_int(rd_reply_at(r, at + 2), &e->processing))
            return false;
        g->count = i + 1;
    }
    return true;
}

/* drop_queue's and purge_all's {"more" | "unregister" | "done", deleted}. */
bool rd_store_parse_cleared(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_cleared_t *c = res;
    if (!is_array(r, 2) || !rd_reply_int(rd_reply_at(r, 1), &c->deleted)) return false;
    const rd_reply_t *state = rd_reply_at(r, 0);
    if (rd_reply_is(state, "more")) c->state = RD_CLEAR_MORE;
    else if (rd_reply_is(state, "unregister")) c->state = RD_CLEAR_UNREGISTER;
    else if (rd_reply_is(state, "done")) c->state = RD_CLEAR_DONE;
    else return false;
    return true;
}

/* tags_set's and tags_remove's {"ok", count}; {"too_many", count}: the set
 * would pass RD_TAGS_MAX, nothing changed (RD_STORE_INVALID_STATE). */
bool rd_store_parse_tags(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_count_t *c = res;
    if (!is_array(r, 2) || !rd_reply_int(rd_reply_at(r, 1), &c->n)) return false;
    const rd_reply_t *code = rd_reply_at(r, 0);
    if (rd_reply_is(code, "too_many")) {
        c->head.status = RD_STORE_INVALID_STATE;
        c->head.state = (rd_str_t){ "too_many", 8 };
        return true;
    }
    return rd_reply_is(code, "ok");
}

bool rd_store_parse_pong(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)res, (void)hint;
    return rd_reply_is(r, "PONG");
}

/* ---------------------------------------------------------------- the rows' frees */

void rd_result_free_messages(void *res)
{
    rd_store_messages_t *m = res;
    free_messages_of(m->messages, m->count);
}

void rd_result_free_enqueued_many(void *res)
{
    rd_store_enqueued_many_t *m = res;
    for (size_t i = 0; i < m->count; i++) rd_result_free_messages(&m->items[i]);
    rd_free(m->items);
}

void rd_result_free_list(void *res)
{
    rd_store_list_t *l = res;
    free_messages_of(l->messages, l->count);
}

void rd_result_free_outcomes(void *res)
{
    rd_free(((rd_store_outcomes_t *)res)->outcomes);
}

void rd_result_free_settled(void *res)
{
    rd_store_settled_t *s = res;
    rd_free(s->outcomes);
    free_messages_of(s->messages, s->count);
}

void rd_result_free_stats(void *res)
{
    rd_store_stats_result_t *s = res;
    rd_free(s->stats.totals);
    rd_free(s->stats.top_errors);
}

void rd_result_free_series(void *res)
{
    rd_free(((rd_store_series_t *)res)->values);
}

void rd_result_free_page(void *res)
{
    rd_free(((rd_store_page_t *)res)->names);
}

void rd_result_free_taken(void *res)
{
    rd_free(((rd_store_taken_t *)res)->alert_names);  /* names point into it */
}

void rd_result_free_alerts_taken(void *res)
{
    rd_free(((rd_store_alerts_taken_t *)res)->alerts);
}

void rd_result_free_strings(void *res)
{
    rd_free(((rd_store_strings_t *)res)->strings);
}

void rd_result_free_redrive_taken(void *res)
{
    rd_free(((rd_store_redrive_taken_t *)res)->letters);
}

void rd_result_free_ids(void *res)
{
    rd_free(((rd_store_ids_t *)res)->ids);
}

void rd_result_free_groups(void *res)
{
    rd_free(((rd_store_groups_t *)res)->groups);
}

/* "integer 7", "array of 0", "string \"ok\"": what came, for the log. */
void rd_reply_describe(const rd_reply_t *r, char *out, size_t cap)
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
