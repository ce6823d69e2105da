/* request.c - parsing and validating request bodies and query strings. */
#include "retryd/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "retryd/alloc.h"
#include "retryd/config.h"
#include "retryd/hex.h"
#include "retryd/router.h"
#include "retryd/utf8.h"

static bool body_is_empty(const char *body, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n')
            return false;
    }
    return true;
}

/* Parses a body that must be a JSON object; an empty body counts as {} when
 * empty_ok. *doc is NULL for an empty body. *marked is the NUL-marked copy
 * (see rd_json_parse_nul_marked) when the body has an escaped U+0000, else
 * NULL; the caller frees it. */
static rd_req_result_t parse_object(const char *body, size_t len, bool empty_ok,
                                    rd_json_t **doc, rd_json_t **marked)
{
    *doc = NULL;
    *marked = NULL;
    if (body == NULL || body_is_empty(body, len)) return empty_ok ? RD_REQ_OK : RD_REQ_MALFORMED;
    bool has_nul = false;
    *doc = rd_json_parse(body, len, &has_nul);
    if (*doc == NULL) return RD_REQ_MALFORMED;
    if (!rd_json_is_object(*doc)) {
        rd_json_free(*doc);
        *doc = NULL;
        return RD_REQ_MALFORMED;
    }
    if (has_nul) *marked = rd_json_parse_nul_marked(body, len);
    return RD_REQ_OK;
}

/* True when the string field name held a U+0000 (cJSON cut it short there). */
static bool field_has_nul(const rd_json_t *doc, const rd_json_t *marked, const char *name)
{
    if (marked == NULL) return false;
    const char *a = rd_json_string(rd_json_get(doc, name));
    const char *b = rd_json_string(rd_json_get(marked, name));
    return a && b && strlen(a) != strlen(b);
}

/* Every string the API accepts must be valid UTF-8 (docs/reference.md "Text"): JSON
 * text is Unicode, and whatever is stored comes back in JSON answers. */
static bool is_text(const char *s)
{
    return rd_utf8_valid(s, strlen(s));
}

/* An optional integer field in [min, max]: absent or null leaves *out as is. */
static void int_field(const rd_json_t *doc, const char *name, long long min, long long max,
                      long long *out, const char *message, rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(doc, name);
    if (v == NULL || rd_json_is_null(v)) return;
    long long n;
    if (!rd_json_integer(v, &n) || n < min || n > max) {
        rd_field_errors_add(errs, name, "invalid", message);
        return;
    }
    *out = n;
}

/* An optional integer query parameter in [min, max]: absent leaves *out as
 * is; anything else but such an integer adds an error. */
static void query_int(const char *query, size_t query_len, const char *name, long long min,
                      long long max, long long *out, const char *message,
                      rd_field_errors_t *errs)
{
    char text[32];
    long n = rd_query_get(query, query_len, name, text, sizeof text);
    if (n == -1) return;
    char *end = text;
    long long value = n > 0 ? strtoll(text, &end, 10) : 0;
    if (n <= 0 || *end != '\0' || value < min || value > max) {
        rd_field_errors_add(errs, name, "invalid", message);
        return;
    }
    *out = value;
}

/* The same for a query parameter, used where the body did not give it. */
static void int_query(const rd_json_t *doc, const char *query, size_t query_len,
                      const char *name, long long min, long long max, long long *out,
                      const char *message, rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(doc, name);
    if (v != NULL && !rd_json_is_null(v)) return;
    query_int(query, query_len, name, min, max, out, message, errs);
}

static rd_req_result_t finish(rd_json_t **doc, const rd_field_errors_t *errs)
{
    if (errs->count == 0) return RD_REQ_OK;
    rd_json_free(*doc);
    *doc = NULL;
    return RD_REQ_INVALID;
}

static int name_problem(const char *name, size_t len, size_t max);

/* An enqueue's group (docs/reference.md "Fairness groups"): absent or null
 * is none; else 1-RD_GROUP_MAX bytes of UTF-8 without control characters
 * (a U+0000, which cJSON cut short, is one). */
static void enqueue_group(const rd_json_t *obj, const rd_json_t *marked, rd_enqueue_req_t *out,
                          rd_field_errors_t *errs)
{
    static const char *const why[] = {
        NULL, "group must be a string of 1 to " RD_LIMIT_STR(RD_GROUP_MAX) " bytes.",
        "group must be valid UTF-8.", "group must not contain control characters." };
    rd_json_t *v = rd_json_get(obj, "group");
    if (v == NULL || rd_json_is_null(v)) return;
    const char *s = rd_json_string(v);
    int problem = s == NULL ? RD_NAME_LENGTH : name_problem(s, strlen(s), RD_GROUP_MAX);
    if (problem == RD_NAME_OK && field_has_nul(obj, marked, "group"))
        problem = RD_NAME_CONTROL;
    if (problem != RD_NAME_OK) {
        rd_field_errors_add(errs, "group", "invalid", why[problem]);
        return;
    }
    out->group = s;
    out->group_len = strlen(s);
}

/* The fields of one message to enqueue: obj is a single enqueue's body or
 * one item of a batch's "messages" (marked: its NUL-marked twin, or NULL),
 * checked the same way, errors under the same names. out's strings are
 * borrowed from obj; out->doc is left alone. */
static void enqueue_fields(const rd_json_t *obj, const rd_json_t *marked, rd_enqueue_req_t *out,
                           rd_field_errors_t *errs)
{
    rd_json_t *payload = rd_json_get(obj, "payload");
    if (payload == NULL || rd_json_is_null(payload)) {
        rd_field_errors_add(errs, "payload", "required", "payload is required.");
    } else if (!rd_json_is_string(payload)) {
        rd_field_errors_add(errs, "payload", "invalid", "payload must be a string.");
    } else if (field_has_nul(obj, marked, "payload")) {
        rd_field_errors_add(errs, "payload", "invalid", "payload must not contain U+0000.");
    } else if (!is_text(rd_json_string(payload))) {
        rd_field_errors_add(errs, "payload", "invalid", "payload must be valid UTF-8.");
    } else {
        out->payload = rd_json_string(payload);
        out->payload_len = strlen(out->payload);
    }

    long long max_retries = RD_MAX_RETRIES_DEFAULT;
    int_field(obj, "max_retries", 1, RD_MAX_RETRIES_MAX, &max_retries,
              "max_retries must be between 1 and " RD_LIMIT_STR(RD_MAX_RETRIES_MAX) ".", errs);
    out->max_retries = (int)max_retries;
    rd_json_t *given = rd_json_get(obj, "max_retries");
    out->max_retries_given = given != NULL && !rd_json_is_null(given);

    long long delay_s = -1;   /* none given: the queue policy's delay_seconds applies */
    int_field(obj, "delay_seconds", 0, RD_DELAY_SECONDS_MAX, &delay_s,
              "delay_seconds must be an integer between 0 and " RD_LIMIT_STR(RD_DELAY_SECONDS_MAX)
              " (30 days).", errs);
    out->delay_ms = delay_s < 0 ? -1 : delay_s * 1000;

    long long ttl_s = -1;
    int_field(obj, "ttl_seconds", 1, RD_TTL_SECONDS_MAX, &ttl_s,
              "ttl_seconds must be an integer between 1 and " RD_LIMIT_STR(RD_TTL_SECONDS_MAX)
              " (30 days).", errs);
    out->ttl_ms = ttl_s > 0 ? ttl_s * 1000 : -1;

    long long priority = 0;
    int_field(obj, "priority", 0, RD_PRIORITY_MAX, &priority,
              "priority must be an integer between 0 and " RD_LIMIT_STR(RD_PRIORITY_MAX) ".", errs);
    out->priority = (int)priority;

    rd_json_t *key = rd_json_get(obj, "idempotency_key");
    if (key && !rd_json_is_null(key)) {
        const char *k = rd_json_string(key);
        size_t k_len = k ? strlen(k) : 0;
        if (k == NULL || k_len == 0 || k_len > RD_IDEMPOTENCY_KEY_MAX ||
            field_has_nul(obj, marked, "idempotency_key"))
            rd_field_errors_add(errs, "idempotency_key", "invalid",
                                "idempotency_key must be a string of 1 to " RD_LIMIT_STR(RD_IDEMPOTENCY_KEY_MAX)
                                " bytes.");
        else if (!is_text(k))
            rd_field_errors_add(errs, "idempotency_key", "invalid",
                                "idempotency_key must be valid UTF-8.");
        else
            out->idempotency_key = k;
    }
    enqueue_group(obj, marked, out, errs);
}

rd_req_result_t rd_request_enqueue(const char *body, size_t len, rd_enqueue_req_t *out,
                                   rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, false, &out->doc, &marked);
    if (r != RD_REQ_OK) return r;
    if (rd_json_get(out->doc, "messages") != NULL) {
        out->marked = marked;   /* rd_request_enqueue_batch takes both over */
        return RD_REQ_BATCH;
    }
    enqueue_fields(out->doc, marked, out, errs);
    rd_json_free(marked);
    return finish(&out->doc, errs);
}

/* The fields of a single enqueue, which a batch's body must not have beside
 * "messages" (they belong in each item). */
static const char *const ENQUEUE_FIELDS[] = { "payload", "max_retries", "delay_seconds",
                                              "ttl_seconds", "priority", "idempotency_key",
                                              "group" };

rd_req_result_t rd_request_enqueue_batch(rd_enqueue_req_t *e, rd_enqueue_batch_req_t *out,
                                         rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    out->doc = e->doc;
    out->marked = e->marked;
    e->doc = e->marked = NULL;
    for (size_t i = 0; i < sizeof ENQUEUE_FIELDS / sizeof ENQUEUE_FIELDS[0]; i++) {
        if (rd_json_get(out->doc, ENQUEUE_FIELDS[i]) == NULL) continue;
        rd_field_errors_add(errs, ENQUEUE_FIELDS[i], "invalid",
                            i == 0 ? "payload and messages cannot be given together: a body is "
                                     "one message or a batch."
                                   : "this field goes in each item of messages.");
    }
    const rd_json_t *list = rd_json_get(out->doc, "messages");
    size_t n = rd_json_array_size(list);
    if (!rd_json_is_array(list) || n < 1 || n > RD_ENQUEUE_BATCH_MAX)
        rd_field_errors_add(errs, "messages", "invalid",
                            "messages must be an array of 1 to " RD_LIMIT_STR(RD_ENQUEUE_BATCH_MAX)
                            " messages.");
    if (errs->count > 0) {
        rd_request_enqueue_batch_free(out);
        return RD_REQ_INVALID;
    }
    out->count = n;
    out->items = rd_calloc(n, sizeof *out->items);
    out->errs = rd_calloc(n, sizeof *out->errs);
    const rd_json_t *twin = out->marked ? rd_json_get(out->marked, "messages") : NULL;
    const rd_json_t *m = twin ? rd_json_array_first(twin) : NULL;
    size_t i = 0;
    for (const rd_json_t *it = rd_json_array_first(list); it; it = rd_json_next(it), i++) {
        out->items[i].malformed = !rd_json_is_object(it);
        if (out->items[i].malformed) out->invalid++;
        else enqueue_fields(it, m, &out->items[i], &out->errs[i]);
        if (!out->items[i].malformed && out->errs[i].count > 0) out->invalid++;
        m = rd_json_next(m);
    }
    return RD_REQ_OK;
}

void rd_request_enqueue_batch_free(rd_enqueue_batch_req_t *b)
{
    rd_json_free(b->doc);
    rd_json_free(b->marked);
    rd_free(b->items);
    rd_free(b->errs);
    memset(b, 0, sizeof *b);
}

/* Where field errors go: under their own names (list NULL), or under those
 * of item `index` of a list ("settle[2].error"). Item names are formatted
 * into a static table, one per error slot, which holds until the next
 * request is parsed (the 422 is written before that). */
typedef struct field_sink {
    rd_field_errors_t *errs;
    const char *list;
    size_t index;
} field_sink_t;

static void sink_add(const field_sink_t *k, const char *name, const char *code,
                     const char *message)
{
    static char names[RD_MAX_FIELD_ERRORS][48];
    if (k->list == NULL) {
        rd_field_errors_add(k->errs, name, code, message);
        return;
    }
    if (k->errs->count == RD_MAX_FIELD_ERRORS) return;
    char *slot = names[k->errs->count];
    snprintf(slot, sizeof names[0], "%s[%zu]%s%s", k->list, k->index, name ? "." : "",
             name ? name : "");
    rd_field_errors_add(k->errs, slot, code, message);
}

/* obj's lease_token into *out; absent or null leaves *out as is. */
static void check_token(const rd_json_t *obj, const char **out, const field_sink_t *k)
{
    rd_json_t *v = rd_json_get(obj, "lease_token");
    if (v == NULL || rd_json_is_null(v)) return;
    const char *s = rd_json_string(v);
    if (s == NULL || s[0] == '\0' || strlen(s) > RD_LEASE_TOKEN_MAX || !is_text(s))
        sink_add(k, "lease_token", "invalid", "lease_token must be the string a claim returned.");
    else
        *out = s;
}

/* The fields of a failure in obj (marked: its NUL-marked twin, or NULL):
 * error (required text), retryable (default true), retry_after_seconds
 * (default: the backoff table, -1). */
static void check_failure(const rd_json_t *obj, const rd_json_t *marked, const char **error,
                          bool *retryable, long long *retry_after_ms, const field_sink_t *k)
{
    rd_json_t *v = rd_json_get(obj, "error");
    if (v == NULL || rd_json_is_null(v))
        sink_add(k, "error", "required", "error is required.");
    else if (!rd_json_is_string(v))
        sink_add(k, "error", "invalid", "error must be a string.");
    else if (field_has_nul(obj, marked, "error"))
        sink_add(k, "error", "invalid", "error must not contain U+0000.");
    else if (!is_text(rd_json_string(v)))
        sink_add(k, "error", "invalid", "error must be valid UTF-8.");
    else
        *error = rd_json_string(v);

    *retryable = true;
    v = rd_json_get(obj, "retryable");
    if (v && !rd_json_is_null(v)) {
        if (rd_json_is_bool(v)) *retryable = rd_json_bool(v);
        else sink_add(k, "retryable", "invalid", "retryable must be a boolean.");
    }

    *retry_after_ms = -1;
    v = rd_json_get(obj, "retry_after_seconds");
    long long after_s;
    if (v && !rd_json_is_null(v)) {
        if (!rd_json_integer(v, &after_s) || after_s < 0 || after_s > RD_DELAY_SECONDS_MAX)
            sink_add(k, "retry_after_seconds", "invalid",
                     "retry_after_seconds must be an integer between 0 and "
                     RD_LIMIT_STR(RD_DELAY_SECONDS_MAX) " (30 days).");
        else
            *retry_after_ms = after_s * 1000;
    }
}

/* A snooze's delay_seconds in obj (required, 0..RD_DELAY_SECONDS_MAX) into
 * *delay_ms (docs/reference.md "Snooze"). */
static void check_delay(const rd_json_t *obj, long long *delay_ms, const field_sink_t *k)
{
    rd_json_t *v = rd_json_get(obj, "delay_seconds");
    long long delay_s;
    if (v == NULL || rd_json_is_null(v))
        sink_add(k, "delay_seconds", "required", "delay_seconds is required.");
    else if (!rd_json_integer(v, &delay_s) || delay_s < 0 || delay_s > RD_DELAY_SECONDS_MAX)
        sink_add(k, "delay_seconds", "invalid",
                 "delay_seconds must be an integer between 0 and "
                 RD_LIMIT_STR(RD_DELAY_SECONDS_MAX) " (30 days).");
    else
        *delay_ms = delay_s * 1000;
}

static void token_field(rd_settle_req_t *out, rd_field_errors_t *errs)
{
    field_sink_t k = { errs, NULL, 0 };
    check_token(out->doc, &out->lease_token, &k);
}

/* settle of a claim: 1-RD_SETTLE_BATCH_MAX settlements into out->settle. */
static void settle_field(rd_claim_req_t *out, const rd_json_t *marked, rd_field_errors_t *errs)
{
    rd_json_t *items = rd_json_get(out->doc, "settle");
    if (items == NULL || rd_json_is_null(items)) return;
    size_t n = rd_json_array_size(items);
    if (!rd_json_is_array(items) || n == 0 || n > RD_SETTLE_BATCH_MAX) {
        rd_field_errors_add(errs, "settle", "invalid",
                            "settle must be an array of 1 to " RD_LIMIT_STR(RD_SETTLE_BATCH_MAX)
                            " {id, lease_token?, outcome, "
                            "error?, retryable?, retry_after_seconds?, delay_seconds?} objects.");
        return;
    }
    rd_json_t *marked_items = marked ? rd_json_get(marked, "settle") : NULL;
    for (size_t i = 0; i < n; i++) {
        field_sink_t k = { errs, "settle", i };
        rd_json_t *item = rd_json_array_at(items, i);
        rd_json_t *marked_item = marked_items ? rd_json_array_at(marked_items, i) : NULL;
        rd_settlement_t *s = &out->settle[i];
        memset(s, 0, sizeof *s);
        s->retryable = true;
        s->retry_after_ms = -1;
        if (!rd_json_is_object(item)) {
            sink_add(&k, NULL, "invalid", "each settlement must be an object.");
            continue;
        }
        rd_json_t *id = rd_json_get(item, "id");
        if (id == NULL || rd_json_is_null(id))
            sink_add(&k, "id", "required", "id is required.");
        else if (!rd_json_integer(id, &s->id) || s->id < 1)
            sink_add(&k, "id", "invalid", "id must be a positive integer.");
        check_token(item, &s->lease_token, &k);
        rd_json_t *v = rd_json_get(item, "outcome");
        const char *outcome = rd_json_string(v);
        if (v == NULL || rd_json_is_null(v))
            sink_add(&k, "outcome", "required", "outcome is required.");
        else if (outcome == NULL ||
                 (strcmp(outcome, "succeeded") != 0 && strcmp(outcome, "failed") != 0 &&
                  strcmp(outcome, "snoozed") != 0))
            sink_add(&k, "outcome", "invalid",
                     "outcome must be \"succeeded\", \"failed\" or \"snoozed\".");
        else if (strcmp(outcome, "failed") == 0) {
            /* A success takes no more fields, as the succeed route takes none. */
            s->failed = true;
            check_failure(item, marked_item, &s->error, &s->retryable, &s->retry_after_ms, &k);
        } else if (strcmp(outcome, "snoozed") == 0) {
            s->snoozed = true;
            check_delay(item, &s->delay_ms, &k);
        }
    }
    out->nsettle = n;
}

rd_req_result_t rd_request_claim(const char *body, size_t len, const char *query,
                                 size_t query_len, long long default_lease_ms,
                                 rd_claim_req_t *out, rd_field_errors_t *errs)
{
    out->doc = NULL;
    out->nsettle = 0;
    out->worker = NULL;
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, true, &out->doc, &marked);
    if (r != RD_REQ_OK) return r;
    settle_field(out, marked, errs);
    rd_json_t *worker = rd_json_get(out->doc, "worker");
    if (worker && !rd_json_is_null(worker)) {
        const char *s = rd_json_string(worker);
        size_t s_len = s ? strlen(s) : 0;
        if (s == NULL || s_len == 0 || s_len > RD_WORKER_MAX ||
            field_has_nul(out->doc, marked, "worker"))
            rd_field_errors_add(errs, "worker", "invalid",
                                "worker must be a string of 1 to " RD_LIMIT_STR(RD_WORKER_MAX)
                                " bytes.");
        else if (!is_text(s))
            rd_field_errors_add(errs, "worker", "invalid", "worker must be valid UTF-8.");
        else
            out->worker = s;
    }
    rd_json_free(marked);

    const char *lease_msg =
        "lease_seconds must be an integer between 1 and " RD_LIMIT_STR(RD_LEASE_SECONDS_MAX) ".";
    const char *wait_msg =
        "wait_seconds must be an integer between 0 and " RD_LIMIT_STR(RD_WAIT_SECONDS_MAX) ".";
    const char *count_msg =
        "count must be an integer between 1 and " RD_LIMIT_STR(RD_CLAIM_COUNT_MAX) ".";
    long long lease_s = -1, wait_s = -1, count = -1;   /* wait -1: none given */
    int_field(out->doc, "lease_seconds", 1, RD_LEASE_SECONDS_MAX, &lease_s, lease_msg, errs);
    int_query(out->doc, query, query_len, "lease_seconds", 1, RD_LEASE_SECONDS_MAX, &lease_s,
              lease_msg, errs);
    int_field(out->doc, "wait_seconds", 0, RD_WAIT_SECONDS_MAX, &wait_s, wait_msg, errs);
    int_query(out->doc, query, query_len, "wait_seconds", 0, RD_WAIT_SECONDS_MAX, &wait_s,
              wait_msg, errs);
    int_field(out->doc, "count", 1, RD_CLAIM_COUNT_MAX, &count, count_msg, errs);
    int_query(out->doc, query, query_len, "count", 1, RD_CLAIM_COUNT_MAX, &count, count_msg,
              errs);
    out->lease_ms = lease_s > 0 ? lease_s * 1000 : default_lease_ms;
    out->lease_given = lease_s > 0;
    out->wait_ms = wait_s < 0 ? -1 : wait_s * 1000;
    out->batch = count > 0;
    out->count = count > 0 ? (int)count : 1;
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_succeed(const char *body, size_t len, rd_settle_req_t *out,
                                   rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, true, &out->doc, &marked);
    rd_json_free(marked);
    if (r != RD_REQ_OK) return r;
    token_field(out, errs);
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_fail(const char *body, size_t len, rd_settle_req_t *out,
                                rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, false, &out->doc, &marked);
    if (r != RD_REQ_OK) return r;
    field_sink_t k = { errs, NULL, 0 };
    check_token(out->doc, &out->lease_token, &k);
    check_failure(out->doc, marked, &out->error, &out->retryable, &out->retry_after_ms, &k);
    rd_json_free(marked);
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_snooze(const char *body, size_t len, rd_settle_req_t *out,
                                  rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    /* An empty body is {}: 422, delay_seconds is required. */
    rd_req_result_t r = parse_object(body, len, true, &out->doc, &marked);
    rd_json_free(marked);
    if (r != RD_REQ_OK) return r;
    field_sink_t k = { errs, NULL, 0 };
    check_token(out->doc, &out->lease_token, &k);
    check_delay(out->doc, &out->delay_ms, &k);
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_extend(const char *body, size_t len, long long default_lease_ms,
                                  rd_settle_req_t *out, rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, true, &out->doc, &marked);
    rd_json_free(marked);
    if (r != RD_REQ_OK) return r;
    token_field(out, errs);
    long long lease_s = -1;
    int_field(out->doc, "lease_seconds", 1, RD_LEASE_SECONDS_MAX, &lease_s,
              "lease_seconds must be an integer between 1 and " RD_LIMIT_STR(RD_LEASE_SECONDS_MAX) ".", errs);
    out->lease_ms = lease_s > 0 ? lease_s * 1000 : default_lease_ms;
    out->lease_given = lease_s > 0;
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_ack(const char *body, size_t len, rd_ack_req_t *out,
                               rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, false, &out->doc, &marked);
    rd_json_free(marked);
    if (r != RD_REQ_OK) return r;
    rd_json_t *items = rd_json_get(out->doc, "messages");
    size_t n = rd_json_array_size(items);
    if (!rd_json_is_array(items) || n == 0 || n > RD_ACK_BATCH_MAX) {
        rd_field_errors_add(errs, "messages", items ? "invalid" : "required",
                            "messages must be an array of 1 to " RD_LIMIT_STR(RD_ACK_BATCH_MAX)
                            " {id, lease_token?, outcome?, delay_seconds?} objects.");
        return finish(&out->doc, errs);
    }
    /* Field names point into a static table: errors outlive this call. */
    static char names[RD_ACK_BATCH_MAX][2][32];
    for (size_t i = 0; i < n; i++) {
        rd_json_t *item = rd_json_array_at(items, i);
        long long id;
        if (!rd_json_integer(rd_json_get(item, "id"), &id) || id < 1) {
            snprintf(names[i][0], sizeof names[i][0], "messages[%zu].id", i);
            rd_field_errors_add(errs, names[i][0], "invalid", "id must be a positive integer.");
            continue;
        }
        out->ids[i] = id;
        rd_json_t *token = rd_json_get(item, "lease_token");
        if (token && !rd_json_is_null(token)) {
            const char *t = rd_json_string(token);
            if (t == NULL || t[0] == '\0' || strlen(t) > RD_LEASE_TOKEN_MAX || !is_text(t)) {
                snprintf(names[i][1], sizeof names[i][1], "messages[%zu].lease_token", i);
                rd_field_errors_add(errs, names[i][1], "invalid",
                                    "lease_token must be the string a claim returned.");
            } else {
                out->tokens[i] = t;
            }
        }
        /* outcome: "succeeded" (the default) or "snoozed" with its delay
         * (docs/reference.md "Snooze"); a failure carries an error, which
         * the settle items of a claim and the fail route take. */
        field_sink_t k = { errs, "messages", i };
        rd_json_t *v = rd_json_get(item, "outcome");
        const char *outcome = rd_json_string(v);
        if (v == NULL || rd_json_is_null(v) || (outcome && strcmp(outcome, "succeeded") == 0))
            continue;
        if (outcome == NULL || strcmp(outcome, "snoozed") != 0) {
            sink_add(&k, "outcome", "invalid", "outcome must be \"succeeded\" or \"snoozed\".");
            continue;
        }
        out->snoozed[i] = true;
        out->any_snoozed = true;
        check_delay(item, &out->delay_ms[i], &k);
    }
    out->count = n;
    return finish(&out->doc, errs);
}

static void replay_target(rd_replay_req_t *out, const rd_json_t *marked, rd_field_errors_t *errs);

rd_req_result_t rd_request_replay(const char *body, size_t len, rd_replay_req_t *out,
                                  rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, false, &out->doc, &marked);
    if (r != RD_REQ_OK) return r;
    rd_json_t *ids = rd_json_get(out->doc, "ids");
    rd_json_t *all = rd_json_get(out->doc, "all");
    rd_json_t *needle = rd_json_get(out->doc, "error_contains");
    int given = (ids != NULL) + (all != NULL) + (needle != NULL);
    if (given != 1) {
        rd_field_errors_add(errs, given ? "body" : "ids", given ? "invalid" : "required",
                            "Give exactly one of ids, all or error_contains.");
    } else if (ids) {
        size_t n = rd_json_array_size(ids);
        if (!rd_json_is_array(ids) || n == 0 || n > RD_REPLAY_IDS_MAX) {
            rd_field_errors_add(errs, "ids", "invalid",
                                "ids must be an array of 1 to " RD_LIMIT_STR(RD_REPLAY_IDS_MAX) " ids.");
        } else {
            out->mode = "ids";
            out->ids = rd_calloc(n, sizeof *out->ids);
            out->count = n;
            for (size_t i = 0; i < n; i++) {
                if (!rd_json_integer(rd_json_array_at(ids, i), &out->ids[i]) || out->ids[i] < 1) {
                    rd_field_errors_add(errs, "ids", "invalid",
                                        "ids must hold positive integers only.");
                    break;
                }
            }
        }
    } else if (all) {
        if (!rd_json_is_bool(all) || !rd_json_bool(all))
            rd_field_errors_add(errs, "all", "invalid", "all must be true.");
        else
            out->mode = "all";
    } else {
        const char *text = rd_json_string(needle);
        if (text == NULL || text[0] == '\0' || strlen(text) > RD_TEXT_FILTER_MAX ||
            field_has_nul(out->doc, marked, "error_contains"))
            rd_field_errors_add(errs, "error_contains", "invalid",
                                "error_contains must be a string of 1 to " RD_LIMIT_STR(RD_TEXT_FILTER_MAX)
                                " bytes.");
        else if (!is_text(text))
            rd_field_errors_add(errs, "error_contains", "invalid",
                                "error_contains must be valid UTF-8.");
        else {
            out->mode = "error";
            out->needle = text;
        }
    }
    replay_target(out, marked, errs);
    rd_json_free(marked);
    if (errs->count) {
        rd_request_replay_free(out);
        return RD_REQ_INVALID;
    }
    return RD_REQ_OK;
}

void rd_request_replay_free(rd_replay_req_t *r)
{
    rd_free(r->ids);
    r->ids = NULL;
    rd_json_free(r->doc);
    r->doc = NULL;
}

rd_req_result_t rd_request_kill(const char *body, size_t len, rd_settle_req_t *out,
                                rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    rd_json_t *marked;
    rd_req_result_t r = parse_object(body, len, true, &out->doc, &marked);
    if (r != RD_REQ_OK) {
        rd_json_free(marked);
        return r;
    }
    rd_json_t *reason = rd_json_get(out->doc, "reason");
    if (reason && !rd_json_is_null(reason)) {
        const char *text = rd_json_string(reason);
        if (text == NULL || strlen(text) > RD_KILL_REASON_MAX || field_has_nul(out->doc, marked, "reason"))
            rd_field_errors_add(errs, "reason", "invalid",
                                "reason must be a string of at most " RD_LIMIT_STR(RD_KILL_REASON_MAX) " bytes.");
        else if (!is_text(text))
            rd_field_errors_add(errs, "reason", "invalid", "reason must be valid UTF-8.");
        else
            out->error = text;
    }
    rd_json_free(marked);
    return finish(&out->doc, errs);
}

rd_req_result_t rd_request_stats(const char *query, size_t query_len, int *top,
                                 rd_field_errors_t *errs)
{
    long long v = RD_STATS_TOP_DEFAULT;
    query_int(query, query_len, "top", 1, RD_STATS_TOP_MAX, &v,
              "top must be an integer between 1 and " RD_LIMIT_STR(RD_STATS_TOP_MAX) ".",
              errs);
    *top = (int)v;
    return errs->count ? RD_REQ_INVALID : RD_REQ_OK;
}

rd_req_result_t rd_request_series(const char *query, size_t query_len, const char **out,
                                  rd_field_errors_t *errs)
{
    char text[16];
    long n = rd_query_get(query, query_len, "series", text, sizeof text);
    *out = NULL;
    if (n == -1) return RD_REQ_OK;
    if (n >= 0 && strcmp(text, "minute") == 0) *out = "minute";
    else if (n >= 0 && strcmp(text, "hour") == 0) *out = "hour";
    else rd_field_errors_add(errs, "series", "invalid", "series must be minute or hour.");
    return errs->count ? RD_REQ_INVALID : RD_REQ_OK;
}

rd_req_result_t rd_request_empty(const char *body, size_t len)
{
    rd_json_t *doc, *marked;
    rd_req_result_t r = parse_object(body, len, true, &doc, &marked);
    rd_json_free(doc);
    rd_json_free(marked);
    return r;
}

rd_req_result_t rd_request_list(const char *query, size_t query_len, rd_list_req_t *out,
                                rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    out->limit = RD_LIST_LIMIT_DEFAULT;
    long n = rd_query_get(query, query_len, "status", out->status, sizeof out->status);
    if (n == -2 || (n >= 0 && strcmp(out->status, "pending") != 0 &&
                    strcmp(out->status, "processing") != 0 &&
                    strcmp(out->status, "succeeded") != 0 && strcmp(out->status, "dead") != 0)) {
        rd_field_errors_add(errs, "status", "invalid",
                            "status must be one of pending, processing, succeeded, dead.");
        out->status[0] = '\0';
    }
    long long limit = RD_LIST_LIMIT_DEFAULT;
    query_int(query, query_len, "limit", 1, RD_LIST_LIMIT_MAX, &limit,
              "limit must be an integer between 1 and " RD_LIMIT_STR(RD_LIST_LIMIT_MAX) ".", errs);
    out->limit = (int)limit;
    n = rd_query_get(query, query_len, "cursor", out->cursor, sizeof out->cursor);
    if (n == -2) {
        rd_field_errors_add(errs, "cursor", "invalid", "cursor must be a next_cursor value.");
        out->cursor[0] = '\0';
    }
    n = rd_query_get(query, query_len, "error_contains", out->error_contains,
                     sizeof out->error_contains);
    /* Text, as every string the API takes (README "Text is UTF-8"). */
    if (n == -2 || (n >= 0 && !rd_utf8_valid(out->error_contains, (size_t)n))) {
        rd_field_errors_add(errs, "error_contains", "invalid",
                            "error_contains must be at most " RD_LIMIT_STR(RD_LIST_FILTER_MAX)
                            " bytes of UTF-8 text once percent-decoded (each % followed by two "
                            "hex digits, %XX, and no %00).");
        out->error_contains[0] = '\0';
    }
    out->since_ms = out->until_ms = -1;
    static const char *const bounds[] = { "since", "until" };
    for (int i = 0; i < 2; i++) {
        char ts[64];
        n = rd_query_get(query, query_len, bounds[i], ts, sizeof ts);
        if (n == -1) continue;
        long long ms = n > 0 ? rd_parse_rfc3339_ms(ts) : -1;
        if (ms < 0)
            rd_field_errors_add(errs, bounds[i], "invalid",
                                i == 0 ? "since must be an RFC 3339 time, e.g. 2026-11-30T07:00:00Z."
                                       : "until must be an RFC 3339 time, e.g. 2026-11-30T08:00:00Z.");
        else if (i == 0) out->since_ms = ms;
        else out->until_ms = ms;
    }
    return errs->count ? RD_REQ_INVALID : RD_REQ_OK;
}

rd_req_result_t rd_request_queues(const char *query, size_t query_len, rd_queues_req_t *out,
                                  rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    long long limit = RD_LIST_LIMIT_DEFAULT;
    query_int(query, query_len, "limit", 1, RD_LIST_LIMIT_MAX, &limit,
              "limit must be an integer between 1 and 1000.", errs);
    out->limit = (int)limit;
    long n = rd_query_get(query, query_len, "cursor", out->cursor, sizeof out->cursor);
    if (n == -2) rd_field_errors_add(errs, "cursor", "invalid", "cursor must be a next_cursor value.");
    out->cursor_len = n > 0 ? (size_t)n : 0;
    return errs->count ? RD_REQ_INVALID : RD_REQ_OK;
}

rd_req_result_t rd_request_groups(const char *query, size_t query_len, rd_groups_req_t *out,
                                  rd_field_errors_t *errs)
{
    memset(out, 0, sizeof *out);
    long long limit = RD_GROUPS_LIMIT_DEFAULT;
    query_int(query, query_len, "limit", 1, RD_LIST_LIMIT_MAX, &limit,
              "limit must be an integer between 1 and " RD_LIMIT_STR(RD_LIST_LIMIT_MAX) ".", errs);
    out->limit = (int)limit;
    char hex[2 * sizeof out->cursor + 2];
    long n = rd_query_get(query, query_len, "cursor", hex, sizeof hex);
    long bytes = n > 0 ? rd_hex_decode(hex, (size_t)n, out->cursor, sizeof out->cursor) : 0;
    if (n == -2 || bytes < 0) {   /* absent or empty: the first page */
        rd_field_errors_add(errs, "cursor", "invalid", "cursor must be a next_cursor value.");
        bytes = 0;
    }
    out->cursor_len = (size_t)bytes;
    return errs->count ? RD_REQ_INVALID : RD_REQ_OK;
}

long long rd_parse_rfc3339_ms(const char *s)
{
    int y, mo, d, h, mi, sec, used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
        used != 19)
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970)
        return -1;
    /* A day the month has not (2026-02-31) is no time; timegm would move it on. */
    static const int days[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > days[mo - 1] + (mo == 2 && leap)) return -1;
    const char *p = s + used;
    long long ms = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3) ms = ms * 10 + (*p - '0');
        if (digits == 0) return -1;
        for (; digits < 3; digits++) ms *= 10;
    }
    long long offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59)
            return -1;
        offset_s = (oh * 3600LL + om * 60LL) * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0') return -1;
    struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
                     .tm_hour = h, .tm_min = mi, .tm_sec = sec };
    time_t t = timegm(&tm);
    if (t == (time_t)-1) return -1;
    return ((long long)t - offset_s) * 1000 + ms;
}

/* What is wrong with a queue name (rd_name_problem_t) indexes the messages
 * below (field errors keep their message by pointer). */
static const char *const queue_name_why[] = {
    NULL, "queue must be 1 to " RD_LIMIT_STR(RD_QUEUE_NAME_MAX) " bytes.",
    "queue must be valid UTF-8.", "queue must not contain control characters.",
    "queue must not be \".\" or \"..\"." };
static const char *const to_name_why[] = {
    NULL, "to must be a queue name of 1 to " RD_LIMIT_STR(RD_QUEUE_NAME_MAX) " bytes.",
    "to must be valid UTF-8.", "to must not contain control characters.",
    "to must not be \".\" or \"..\"." };

/* A name of 1 to max bytes of valid UTF-8 without control characters (C0,
 * DEL, C1): RD_NAME_OK, else what is wrong with it. */
static int name_problem(const char *name, size_t len, size_t max)
{
    if (name == NULL || len == 0 || len > max) return RD_NAME_LENGTH;
    const unsigned char *s = (const unsigned char *)name;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        size_t n = rd_utf8_sequence(s + i, len - i, &cp);
        if (n == 0) return RD_NAME_UTF8;
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return RD_NAME_CONTROL;
        i += n;
    }
    return RD_NAME_OK;
}

static int queue_name_problem(const char *name, size_t len)
{
    /* Browsers and curl collapse "." and ".." path segments: such a queue
     * could not be reached from the console again. */
    if (name && (len == 1 || len == 2) && memcmp(name, "..", len) == 0) return RD_NAME_DOTS;
    return name_problem(name, len, RD_QUEUE_NAME_MAX);
}

bool rd_request_queue_name(const char *name, size_t len, rd_field_errors_t *errs)
{
    int why = queue_name_problem(name, len);
    if (why == RD_NAME_OK) return true;
    rd_field_errors_add(errs, "queue", "invalid", queue_name_why[why]);
    return false;
}

int rd_request_queue_name_member(const rd_json_t *doc, const rd_json_t *marked,
                                 const char *field, const char **name)
{
    *name = NULL;
    rd_json_t *v = rd_json_get(doc, field);
    if (v == NULL || rd_json_is_null(v)) return RD_NAME_OK;
    const char *s = rd_json_string(v);
    int why = s == NULL ? RD_NAME_LENGTH : queue_name_problem(s, strlen(s));
    if (why == RD_NAME_OK && field_has_nul(doc, marked, field)) why = RD_NAME_CONTROL;
    if (why == RD_NAME_OK) *name = s;
    return why;
}

/* A batch replay's "to" (a redrive): absent or null replays in place. */
static void replay_target(rd_replay_req_t *out, const rd_json_t *marked, rd_field_errors_t *errs)
{
    const char *name;
    int why = rd_request_queue_name_member(out->doc, marked, "to", &name);
    if (why != RD_NAME_OK) {
        rd_field_errors_add(errs, "to", "invalid", to_name_why[why]);
        return;
    }
    if (name == NULL) return;
    out->to = name;
    out->to_len = strlen(name);
}

long rd_query_get(const char *query, size_t query_len, const char *name, char *out,
                  size_t cap)
{
    if (query == NULL) return -1;
    size_t name_len = strlen(name);
    const char *p = query, *end = query + query_len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pair_end = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(pair_end - p));
        const char *key_end = eq ? eq : pair_end;
        if ((size_t)(key_end - p) == name_len && memcmp(p, name, name_len) == 0) {
            const char *v = eq ? eq + 1 : pair_end;
            size_t v_len = (size_t)(pair_end - v);
            /* The limit is on the decoded value ("%C3%A9" is 2 bytes), so it
             * is decoded first; a value no longer than cap - 1 fits as is. */
            char *decoded = v_len < cap ? out : rd_malloc(v_len + 1);
            long n = rd_percent_decode(v, v_len, decoded, true);
            bool ok = n >= 0 && (size_t)n < cap && memchr(decoded, '\0', (size_t)n) == NULL;
            if (ok && decoded != out) memcpy(out, decoded, (size_t)n + 1);
            if (decoded != out) rd_free(decoded);
            return ok ? n : -2;
        }
        p = pair_end + 1;
    }
    return -1;
}

void rd_request_free(rd_json_t *doc)
{
    rd_json_free(doc);
}
