/* api.c - HTTP handlers for every route (SPEC §5). */
#include "retryd/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/auth.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/log.h"
#include "retryd/metrics.h"
#include "retryd/problem.h"
#include "retryd/request.h"
#include "retryd/router.h"
#include "retryd/ui.h"

/* One request waiting for the store; freed after its response. */
typedef struct call {
    rd_api_t *api;
    rd_http_exchange_t *ex;
    const rd_http_request_t *req;
    rd_route_match_t match;
    bool batch;                 /* claim with count: answer {messages:[...]} */
    /* claim with settle (SPEC §9): the ids in request order, their outcomes
     * once applied, and the claim to park when nothing was claimable. */
    long long *settle_ids;
    char (*settled)[16];
    size_t nsettle;
    long long lease_ms, wait_ms;
    int count;
    rd_ack_req_t *ack;          /* batch acknowledgement: the ids, in order */
    rd_replay_req_t replay;     /* batch replay: what to replay */
    char *cursor;               /* batch replay: where the next call starts */
    long long replayed;         /* batch replay: so far */
    /* GET /queues and /metrics: one page of queues, their stats read with at
     * most FANOUT_IN_FLIGHT calls in flight, gathered here. */
    rd_queue_metrics_t *queues;
    size_t nqueues, sent, outstanding;
    bool any_failed;
    char *next_cursor;          /* the page's, NULL at the end */
    size_t next_cursor_len;
    long long registered;       /* how many queues the registry holds */
} call_t;

enum { FANOUT_IN_FLIGHT = 16 };

static const char *const verbs[RD_ROUTE_COUNT] = {
    [RD_ROUTE_SUCCEED] = "succeed", [RD_ROUTE_FAIL] = "fail",
    [RD_ROUTE_REPLAY] = "replay",   [RD_ROUTE_EXTEND] = "extend",
    [RD_ROUTE_KILL] = "kill",       [RD_ROUTE_DELETE] = "delete",
};

static void call_free(call_t *c)
{
    if (c->ack) {
        rd_request_free(c->ack->doc);
        rd_free(c->ack);
    }
    rd_request_replay_free(&c->replay);
    rd_free(c->settle_ids);
    rd_free(c->settled);
    rd_free(c->cursor);
    rd_free(c->next_cursor);
    for (size_t i = 0; i < c->nqueues; i++) rd_free(c->queues[i].name);
    rd_free(c->queues);
    rd_route_match_free(&c->match);
    rd_free(c);
}

static void respond_json(call_t *c, int status, rd_json_t *doc, const char *extra_headers)
{
    size_t len;
    char *body = rd_json_print(doc, &len);
    rd_json_free(doc);
    rd_http_respond(c->ex, status, "application/json", extra_headers, body, len);
    rd_free(body);
    call_free(c);
}

static void respond_problem(call_t *c, rd_problem_t p, const char *detail,
                            const rd_field_errors_t *errs, const char *extra_headers)
{
    rd_problem_respond(c->ex, c->req, p, detail, errs, extra_headers);
    call_free(c);
}

static void respond_unavailable(call_t *c)
{
    respond_problem(c, RD_PROBLEM_BACKEND_UNAVAILABLE, "Redis is not reachable; nothing was done.",
                    NULL, "Retry-After: 1\r\n");
}

/* Maps a store outcome other than OK to its problem; returns true when it
 * answered. */
static bool respond_store_failure(call_t *c, const rd_store_result_t *res)
{
    char detail[256];
    switch (res->status) {
    case RD_STORE_OK:
    case RD_STORE_DUPLICATE:
        return false;
    case RD_STORE_NOT_FOUND:
        snprintf(detail, sizeof detail, "message %lld does not exist in this queue.", c->match.id);
        respond_problem(c, RD_PROBLEM_NOT_FOUND, detail, NULL, NULL);
        return true;
    case RD_STORE_INVALID_STATE: {
        const char *needs = c->match.route == RD_ROUTE_REPLAY   ? "a dead"
                            : c->match.route == RD_ROUTE_KILL   ? "a pending or processing"
                            : c->match.route == RD_ROUTE_DELETE ? "a non-processing"
                                                                : "a processing";
        snprintf(detail, sizeof detail, "message %lld is %.*s; %s needs %s message.",
                 c->match.id, (int)res->state.len, res->state.ptr, verbs[c->match.route],
                 needs);
        respond_problem(c, RD_PROBLEM_INVALID_STATE, detail, NULL, NULL);
        return true;
    }
    case RD_STORE_LEASE_MISMATCH:
        snprintf(detail, sizeof detail,
                 "lease_token is not the current lease of message %lld (the lease expired and "
                 "the message was claimed again, or the token is wrong).", c->match.id);
        respond_problem(c, RD_PROBLEM_LEASE_MISMATCH, detail, NULL, NULL);
        return true;
    case RD_STORE_BAD_CURSOR: {
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "cursor", "invalid", "cursor must be a next_cursor value.");
        respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The query has invalid fields.", &errs,
                        NULL);
        return true;
    }
    case RD_STORE_UNAVAILABLE:
        respond_unavailable(c);
        return true;
    case RD_STORE_LOST:
        respond_problem(c, RD_PROBLEM_OUTCOME_UNKNOWN,
                        "The link to Redis dropped after the command was sent; it may or may "
                        "not have been applied. Read the message before retrying.",
                        NULL, "Retry-After: 1\r\n");
        return true;
    case RD_STORE_ERROR:
        rd_error("api: Redis error on %.*s: %.*s", (int)c->req->path_len, c->req->path,
                 (int)res->detail.len, res->detail.ptr);
        respond_problem(c, RD_PROBLEM_INTERNAL, "Redis answered with an error; see the log.",
                        NULL, NULL);
        return true;
    }
    return false;
}

/* ---------------------------------------------------------------- store callbacks */

static void on_message(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    if (c->match.route == RD_ROUTE_REPLAY) {
        rd_store_queue_t q = { c->match.queue, c->match.queue_len };
        rd_waiters_notify(c->api->waiters, q);
    }
    if (res->count != 1) {
        rd_store_result_t bad = { .status = RD_STORE_ERROR };
        respond_store_failure(c, &bad);
        return;
    }
    rd_json_t *doc = rd_message_to_json(&res->messages[0], c->match.queue, c->match.queue_len,
                                        false);
    respond_json(c, 200, doc, NULL);
}

static void on_enqueued(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    const rd_message_t *m = &res->messages[0];
    if (res->status == RD_STORE_DUPLICATE) {
        /* Idempotent repeat: the original, 200, nothing created. */
        if (m->status != RD_STATUS_UNKNOWN) {
            respond_json(c, 200, rd_message_to_json(m, c->match.queue, c->match.queue_len, false),
                         NULL);
            return;
        }
        rd_json_t *doc = rd_json_new_object();  /* the original was deleted by retention */
        rd_json_set_int(doc, "id", m->id);
        rd_json_set_stringn(doc, "queue", c->match.queue, c->match.queue_len);
        rd_json_set_null(doc, "status");
        rd_json_set_bool(doc, "deleted", true);
        respond_json(c, 200, doc, NULL);
        return;
    }
    if (m->status == RD_STATUS_PENDING && m->retry_after_ms < 0) {
        rd_store_queue_t q = { c->match.queue, c->match.queue_len };
        rd_waiters_notify(c->api->waiters, q);
    }
    rd_buf_t location = RD_BUF_INIT;
    rd_buf_printf(&location, "Location: %.*s/%lld\r\n", (int)c->req->path_len, c->req->path,
                  m->id);
    respond_json(c, 201, rd_message_to_json(m, c->match.queue, c->match.queue_len, false),
                 location.data);
    rd_buf_free(&location);
}

/* Claimed messages while their answer is on its way: if it cannot be
 * delivered (the client reset), they go straight back, as a departed
 * long-poll's do. */
typedef struct claimed {
    rd_api_t *api;
    char *queue;
    size_t queue_len, count;
    rd_message_t *messages;     /* id and lease_token (owned copy) only */
} claimed_t;

static void on_claim_delivered(bool delivered, void *arg)
{
    claimed_t *k = arg;
    /* api->store is NULL once the server closed it (a shutdown past its
     * deadline): then the leases expire instead. */
    if (!delivered && k->api->store) {
        rd_store_queue_t q = { k->queue, k->queue_len };
        rd_store_hand_back(k->api->store, q, k->count, k->messages);
    }
    for (size_t i = 0; i < k->count; i++) rd_free((char *)k->messages[i].lease_token.ptr);
    rd_free(k->messages);
    rd_free(k->queue);
    rd_free(k);
}

static void hand_back_if_undelivered(call_t *c, const rd_store_result_t *res)
{
    claimed_t *k = rd_malloc(sizeof *k);
    k->api = c->api;
    k->queue = rd_strndup(c->match.queue, c->match.queue_len);
    k->queue_len = c->match.queue_len;
    k->count = res->count;
    k->messages = rd_calloc(res->count, sizeof *k->messages);
    for (size_t i = 0; i < res->count; i++) {
        const rd_str_t *token = &res->messages[i].lease_token;
        rd_message_init(&k->messages[i]);
        k->messages[i].id = res->messages[i].id;
        k->messages[i].lease_token.ptr = rd_strndup(token->ptr ? token->ptr : "", token->len);
        k->messages[i].lease_token.len = token->len;
    }
    rd_http_on_delivery(c->ex, on_claim_delivered, k);
}

static void on_claimed(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    if (res->count == 0) {
        rd_http_respond(c->ex, 204, NULL, NULL, NULL, 0);
        call_free(c);
        return;
    }
    hand_back_if_undelivered(c, res);
    if (!c->batch) {
        respond_json(c, 200, rd_message_to_json(&res->messages[0], c->match.queue,
                                                c->match.queue_len, true), NULL);
        return;
    }
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < res->count; i++)
        rd_json_append(list, rd_message_to_json(&res->messages[i], c->match.queue,
                                                c->match.queue_len, true));
    rd_json_set(doc, "messages", list);
    respond_json(c, 200, doc, NULL);
}

/* A Lua outcome code in the API's spelling ('-' for '_', as the problem
 * types): "not_found" -> "not-found". out holds 16 bytes. */
static void api_code(rd_str_t code, char out[16])
{
    size_t n = code.len < 15 ? code.len : 15;
    for (size_t j = 0; j < n; j++) out[j] = code.ptr[j] == '_' ? '-' : code.ptr[j];
    out[n] = '\0';
}

/* 200 {"settled":[{id, status}...], "messages":[...]} of a claim with settle. */
static void respond_settled(call_t *c, const rd_store_result_t *res)
{
    if (res->count > 0) hand_back_if_undelivered(c, res);
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < c->nsettle; i++) {
        rd_json_t *item = rd_json_new_object();
        rd_json_set_int(item, "id", c->settle_ids[i]);
        rd_json_set_string(item, "status", c->settled[i]);
        rd_json_append(list, item);
    }
    rd_json_set(doc, "settled", list);
    list = rd_json_new_array();
    for (size_t i = 0; i < res->count; i++)
        rd_json_append(list, rd_message_to_json(&res->messages[i], c->match.queue,
                                                c->match.queue_len, true));
    rd_json_set(doc, "messages", list);
    respond_json(c, 200, doc, NULL);
}

/* The claim a settle-and-claim parked for: its settlements stand whatever
 * happens to it, so a claim that failed (Redis went away meanwhile) answers
 * with no messages, never an error that would hide them. */
static void on_settle_waited(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (res->status == RD_STORE_OK) {
        respond_settled(c, res);
        return;
    }
    rd_warn("api: the long-poll claim after a settlement failed (status %d); answering no "
            "messages", (int)res->status);
    rd_store_result_t none = { .status = RD_STORE_OK };
    respond_settled(c, &none);
}

static void on_settle_claimed(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    if (res->settled != c->nsettle) {
        rd_error("api: settle_claim answered %zu outcomes for %zu settlements", res->settled,
                 c->nsettle);
        rd_store_result_t bad = { .status = RD_STORE_ERROR };
        respond_store_failure(c, &bad);
        return;
    }
    c->settled = rd_malloc(c->nsettle * sizeof *c->settled);
    for (size_t i = 0; i < c->nsettle; i++) api_code(res->outcomes[i], c->settled[i]);
    /* Settled at once; with wait_seconds and nothing claimable, the claim
     * waits as a plain long-poll claim does. */
    if (res->count == 0 && c->wait_ms > 0 && c->api->waiters) {
        rd_store_queue_t q = { c->match.queue, c->match.queue_len };
        rd_waiters_park(c->api->waiters, q, c->lease_ms, c->count, c->wait_ms, c->ex,
                        on_settle_waited, c);
        return;
    }
    respond_settled(c, res);
}

static void on_listed(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < res->count; i++)
        rd_json_append(list, rd_message_to_json(&res->messages[i], c->match.queue,
                                                c->match.queue_len, false));
    rd_json_set(doc, "messages", list);
    if (res->next_cursor.len) rd_json_set_stringn(doc, "next_cursor", res->next_cursor.ptr,
                                                  res->next_cursor.len);
    else rd_json_set_null(doc, "next_cursor");
    rd_json_set_int(doc, "total", res->total);
    respond_json(c, 200, doc, NULL);
}

static void on_acked(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    const rd_ack_req_t *ack = c->ack;
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < res->count && i < ack->count; i++) {
        rd_json_t *item = rd_json_new_object();
        rd_json_set_int(item, "id", ack->ids[i]);
        char status[16];
        api_code(res->outcomes[i], status);
        rd_json_set_string(item, "status", status);
        rd_json_append(list, item);
    }
    rd_json_set(doc, "results", list);
    respond_json(c, 200, doc, NULL);
}

static void on_deleted(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    rd_http_respond(c->ex, 204, NULL, NULL, NULL, 0);
    call_free(c);
}

static void on_replayed_batch(const rd_store_result_t *res, void *arg);

enum { REPLAY_BATCH = RD_STORE_REPLAY_IDS_MAX };

/* ids go 200 at a time too; for them the cursor is the offset into the list. */
static int replay_next(call_t *c)
{
    rd_store_queue_t q = { c->match.queue, c->match.queue_len };
    const rd_replay_req_t *r = &c->replay;
    if (strcmp(r->mode, "ids") == 0) {
        size_t from = c->cursor ? strtoul(c->cursor, NULL, 10) : 0;
        size_t n = r->count - from < REPLAY_BATCH ? r->count - from : REPLAY_BATCH;
        return rd_store_replay_many(c->api->store, q, r->mode, r->ids + from, n, 0, NULL, NULL,
                                    on_replayed_batch, c);
    }
    return rd_store_replay_many(c->api->store, q, r->mode, NULL, 0, REPLAY_BATCH, c->cursor,
                                r->needle, on_replayed_batch, c);
}

/* Batch replay runs as many bounded calls as it needs, one at a time, so
 * other clients' commands interleave between them. It stops when the client
 * has gone, and when a call neither replayed anything nor moved the cursor
 * (a library that cannot make progress, e.g. an older one during an upgrade)
 * instead of calling again forever. */
static void on_replayed_batch(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (res->status != RD_STORE_OK) {
        if (c->replayed > 0)
            rd_warn("api: batch replay stopped after %lld replayed", c->replayed);
        respond_store_failure(c, res);
        return;
    }
    c->replayed += res->replayed;
    rd_str_t next = res->next_cursor;
    char offset[24];
    if (strcmp(c->replay.mode, "ids") == 0) {
        size_t from = (c->cursor ? strtoul(c->cursor, NULL, 10) : 0) + REPLAY_BATCH;
        next.len = from < c->replay.count ? (size_t)snprintf(offset, sizeof offset, "%zu", from)
                                          : 0;
        next.ptr = offset;
    }
    if (next.len > 0 && !rd_http_exchange_client_alive(c->ex)) {
        rd_info("api: batch replay stopped after %lld replayed: the client has gone",
                c->replayed);
        respond_unavailable(c);   /* dropped: nobody is listening */
        return;
    }
    if (next.len > 0 && res->replayed == 0 && c->cursor && strlen(c->cursor) == next.len &&
        memcmp(c->cursor, next.ptr, next.len) == 0) {
        char detail[160];
        rd_store_result_t bad = { .status = RD_STORE_ERROR };
        bad.detail.ptr = detail;
        bad.detail.len = (size_t)snprintf(detail, sizeof detail,
                                          "replay_many made no progress at cursor %.64s after "
                                          "%lld replayed; stopped", c->cursor, c->replayed);
        respond_store_failure(c, &bad);
        return;
    }
    if (next.len > 0) {
        rd_free(c->cursor);
        c->cursor = rd_strndup(next.ptr, next.len);
        if (replay_next(c) == 0) return;
        respond_unavailable(c);
        return;
    }
    rd_store_queue_t q = { c->match.queue, c->match.queue_len };
    if (c->replayed > 0) rd_waiters_notify(c->api->waiters, q);
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_int(doc, "replayed", c->replayed);
    respond_json(c, 200, doc, NULL);
}

static rd_json_t *counts_json(const rd_queue_metrics_t *m)
{
    rd_json_t *o = rd_json_new_object();
    rd_json_set_int(o, "pending", m->ready + m->scheduled);
    rd_json_set_int(o, "processing", m->processing);
    rd_json_set_int(o, "succeeded", m->succeeded_now);
    rd_json_set_int(o, "dead", m->dead_now);
    return o;
}

static void on_stats(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    const rd_queue_stats_t *st = &res->stats;
    rd_queue_metrics_t m = { .name = NULL };
    rd_metrics_from_stats(&m, st);
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_stringn(doc, "queue", c->match.queue, c->match.queue_len);
    rd_json_t *counts = counts_json(&m);
    rd_json_set_int(counts, "ready", m.ready);
    rd_json_set_int(counts, "scheduled", m.scheduled);
    rd_json_set(doc, "counts", counts);
    rd_json_t *totals = rd_json_new_object();
    rd_json_set_int(totals, "enqueued", m.enqueued);
    rd_json_set_int(totals, "claimed", m.claimed);
    rd_json_set_int(totals, "succeeded", m.succeeded);
    rd_json_set_int(totals, "failed", m.failed);
    rd_json_set_int(totals, "retried", m.retried);
    rd_json_set_int(totals, "dead", m.dead);
    rd_json_set_int(totals, "replayed", m.replayed);
    rd_json_set_int(totals, "lease_expired", m.lease_expired);
    /* Every other counter of the stats hash (retention, deletes, purges, ...). */
    for (size_t i = 0; i + 1 < st->totals_len; i += 2) {
        const rd_str_t *k = &st->totals[i];
        static const char *const shown[] = { "expired_dead", "expired_succeeded", "deleted",
                                             "purged", "released", "orphans_removed" };
        for (size_t j = 0; j < sizeof shown / sizeof shown[0]; j++) {
            if (k->len == strlen(shown[j]) && memcmp(k->ptr, shown[j], k->len) == 0)
                rd_json_set_int(totals, shown[j],
                                rd_str_to_ll(st->totals[i + 1].ptr, st->totals[i + 1].len));
        }
    }
    rd_json_set(doc, "totals", totals);
    rd_json_set_int(doc, "dead_last_24h", st->dead_last_24h);
    rd_json_t *top = rd_json_new_array();
    for (size_t i = 0; i + 1 < st->top_errors_len; i += 2) {
        rd_json_t *e = rd_json_new_object();
        rd_json_set_stringn(e, "error", st->top_errors[i].ptr, st->top_errors[i].len);
        rd_json_set_int(e, "count",
                        rd_str_to_ll(st->top_errors[i + 1].ptr, st->top_errors[i + 1].len));
        rd_json_append(top, e);
    }
    rd_json_set(doc, "top_errors", top);
    respond_json(c, 200, doc, NULL);
}

/* ---------------------------------------------------------------- every queue */

typedef struct fanout_slot {
    call_t *call;
    size_t index;
} fanout_slot_t;

static void finish_fanout(call_t *c)
{
    if (c->any_failed && c->nqueues > 0 && !rd_store_ready(c->api->store)) {
        respond_unavailable(c);
        return;
    }
    if (c->match.route == RD_ROUTE_METRICS) {
        rd_buf_t text = RD_BUF_INIT;
        rd_metrics_render(&text, c->queues, c->nqueues, rd_store_rtt(c->api->store),
                          c->api->waiters ? rd_waiters_count(c->api->waiters) : 0);
        long long exported = 0;
        for (size_t i = 0; i < c->nqueues; i++) exported += c->queues[i].ok;
        rd_metrics_render_registry(&text, c->registered, c->registered - exported);
        rd_http_respond(c->ex, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text.data,
                        text.len);
        rd_buf_free(&text);
        call_free(c);
        return;
    }
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < c->nqueues; i++) {
        if (!c->queues[i].ok) continue;
        rd_json_t *q = rd_json_new_object();
        rd_json_set_stringn(q, "name", c->queues[i].name, c->queues[i].name_len);
        rd_json_set(q, "counts", counts_json(&c->queues[i]));
        rd_json_set_int(q, "dead_last_24h", c->queues[i].dead_last_24h);
        rd_json_append(list, q);
    }
    rd_json_set(doc, "queues", list);
    if (c->next_cursor) rd_json_set_stringn(doc, "next_cursor", c->next_cursor, c->next_cursor_len);
    else rd_json_set_null(doc, "next_cursor");
    rd_json_set_int(doc, "total", c->registered);
    respond_json(c, 200, doc, NULL);
}

static void on_fanout_stats(const rd_store_result_t *res, void *arg);

/* Keeps at most FANOUT_IN_FLIGHT stats calls in flight until every queue of
 * the page has had one; answers when the last returns. */
static void fanout_pump(call_t *c)
{
    while (c->outstanding < FANOUT_IN_FLIGHT && c->sent < c->nqueues) {
        rd_queue_metrics_t *m = &c->queues[c->sent];
        fanout_slot_t *slot = rd_malloc(sizeof *slot);
        slot->call = c;
        slot->index = c->sent++;
        rd_store_queue_t q = { m->name, m->name_len };
        if (rd_store_stats(c->api->store, q, 0, on_fanout_stats, slot) == 0) {
            c->outstanding++;
        } else {
            c->any_failed = true;
            rd_free(slot);
        }
    }
    if (c->outstanding == 0 && c->sent == c->nqueues) finish_fanout(c);
}

/* A stats answer with no key behind it: a queue whose keys are all gone. */
static bool stats_show_no_key(const rd_queue_stats_t *st)
{
    return st->totals_len == 0 && st->top_errors_len == 0 && st->ready == 0 &&
           st->scheduled == 0 && st->processing == 0 && st->succeeded == 0 && st->dead == 0;
}

static void on_fanout_stats(const rd_store_result_t *res, void *arg)
{
    fanout_slot_t *slot = arg;
    call_t *c = slot->call;
    rd_queue_metrics_t *m = &c->queues[slot->index];
    if (res->status == RD_STORE_OK) {
        rd_metrics_from_stats(m, &res->stats);
        /* The timer looks at it at once and removes it from the registry if
         * it is empty (docs/design.md "Leaving the registry"). */
        if (stats_show_no_key(&res->stats)) {
            rd_store_queue_t q = { m->name, m->name_len };
            rd_store_schedule(c->api->store, q, 0);
        }
    } else {
        c->any_failed = true;
    }
    rd_free(slot);
    c->outstanding--;
    fanout_pump(c);
}

static void on_queue_names(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_store_failure(c, res)) return;
    c->registered = res->total;
    if (res->next_cursor.len > 0) {
        c->next_cursor = rd_strndup(res->next_cursor.ptr, res->next_cursor.len);
        c->next_cursor_len = res->next_cursor.len;
    }
    c->nqueues = res->count;
    c->queues = rd_calloc(res->count ? res->count : 1, sizeof *c->queues);
    for (size_t i = 0; i < res->count; i++) {
        c->queues[i].name = rd_strndup(res->names[i].ptr, res->names[i].len);
        c->queues[i].name_len = res->names[i].len;
    }
    fanout_pump(c);
}

/* GET /queues (a page) and /metrics (the first RD_METRICS_MAX_QUEUES). */
static void list_queues(call_t *c)
{
    int rc;
    if (c->match.route == RD_ROUTE_METRICS) {
        rc = rd_store_queues_page(c->api->store, NULL, 0, RD_METRICS_MAX_QUEUES, on_queue_names,
                                  c);
    } else {
        rd_queues_req_t q;
        rd_field_errors_t errs = { .count = 0 };
        if (rd_request_queues(c->req->query, c->req->query_len, &q, &errs) != RD_REQ_OK) {
            respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The query has invalid fields.",
                            &errs, NULL);
            return;
        }
        rc = rd_store_queues_page(c->api->store, q.cursor, q.cursor_len, q.limit, on_queue_names,
                                  c);
    }
    if (rc != 0) respond_unavailable(c);
}

static void on_pinged(const rd_store_result_t *res, void *arg)
{
    call_t *c = arg;
    if (res->status != RD_STORE_OK) {
        respond_unavailable(c);
        return;
    }
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_string(doc, "status", "ready");
    respond_json(c, 200, doc, NULL);
}

/* ---------------------------------------------------------------- handlers */

static void answer_parse_failure(call_t *c, rd_req_result_t r, const rd_field_errors_t *errs)
{
    if (r == RD_REQ_MALFORMED)
        respond_problem(c, RD_PROBLEM_MALFORMED_REQUEST,
                        "The body must be a JSON object.", NULL, NULL);
    else
        respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The request has invalid fields.", errs,
                        NULL);
}

/* Starts the store operation of a queue route; returns the store's rc, or 1
 * when it already answered (bad input). */
static int dispatch(call_t *c)
{
    rd_api_t *api = c->api;
    const rd_http_request_t *req = c->req;
    rd_store_queue_t q = { c->match.queue, c->match.queue_len };
    long long id = c->match.id;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r;
    int rc;

    switch (c->match.route) {
    case RD_ROUTE_ENQUEUE: {
        rd_enqueue_req_t e;
        r = rd_request_enqueue(req->body, req->body_len, &e, &errs);
        if (r != RD_REQ_OK) break;
        rc = rd_store_enqueue(api->store, q, e.payload, e.payload_len, e.max_retries,
                              e.delay_ms, e.idempotency_key, on_enqueued, c);
        rd_request_free(e.doc);
        return rc;
    }
    case RD_ROUTE_LIST: {
        rd_list_req_t l;
        r = rd_request_list(req->query, req->query_len, &l, &errs);
        if (r != RD_REQ_OK) break;
        return rd_store_list(api->store, q, l.status, l.limit, l.cursor, l.error_contains,
                             l.since_ms, l.until_ms, on_listed, c);
    }
    case RD_ROUTE_GET:
        return rd_store_get(api->store, q, id, on_message, c);
    case RD_ROUTE_CLAIM: {
        rd_claim_req_t cl;
        r = rd_request_claim(req->body, req->body_len, req->query, req->query_len,
                             api->cfg->lease_ms, &cl, &errs);
        if (r != RD_REQ_OK) break;
        c->batch = cl.batch;
        if (cl.nsettle > 0) {
            c->nsettle = cl.nsettle;
            c->settle_ids = rd_malloc(cl.nsettle * sizeof *c->settle_ids);
            for (size_t i = 0; i < cl.nsettle; i++) c->settle_ids[i] = cl.settle[i].id;
            c->lease_ms = cl.lease_ms;
            c->wait_ms = cl.wait_ms;
            c->count = cl.count;
            rc = rd_store_settle_claim(api->store, q, cl.lease_ms, cl.count, cl.nsettle,
                                       cl.settle, on_settle_claimed, c);
            rd_request_free(cl.doc);
            return rc;
        }
        rd_request_free(cl.doc);
        if (cl.wait_ms > 0 && api->waiters) {
            if (!rd_store_ready(api->store)) return -1;
            rd_waiters_park(api->waiters, q, cl.lease_ms, cl.count, cl.wait_ms, c->ex,
                            on_claimed, c);
            return 0;
        }
        return rd_store_claim(api->store, q, cl.lease_ms, cl.count, on_claimed, c);
    }
    case RD_ROUTE_SUCCEED:
    case RD_ROUTE_FAIL:
    case RD_ROUTE_EXTEND: {
        rd_settle_req_t s;
        if (c->match.route == RD_ROUTE_SUCCEED)
            r = rd_request_succeed(req->body, req->body_len, &s, &errs);
        else if (c->match.route == RD_ROUTE_FAIL)
            r = rd_request_fail(req->body, req->body_len, &s, &errs);
        else
            r = rd_request_extend(req->body, req->body_len, api->cfg->lease_ms, &s, &errs);
        if (r != RD_REQ_OK) break;
        if (c->match.route == RD_ROUTE_SUCCEED)
            rc = rd_store_succeed(api->store, q, id, s.lease_token, on_message, c);
        else if (c->match.route == RD_ROUTE_FAIL)
            rc = rd_store_fail(api->store, q, id, s.lease_token, s.error, s.retryable,
                               s.retry_after_ms, on_message, c);
        else
            rc = rd_store_extend(api->store, q, id, s.lease_token, s.lease_ms, on_message, c);
        rd_request_free(s.doc);
        return rc;
    }
    case RD_ROUTE_SUCCEED_MANY:
        c->ack = rd_malloc(sizeof *c->ack);
        r = rd_request_ack(req->body, req->body_len, c->ack, &errs);
        if (r != RD_REQ_OK) break;
        return rd_store_succeed_many(api->store, q, c->ack->count, c->ack->ids,
                                     c->ack->tokens, on_acked, c);
    case RD_ROUTE_KILL: {
        rd_settle_req_t k;
        r = rd_request_kill(req->body, req->body_len, &k, &errs);
        if (r != RD_REQ_OK) break;
        rc = rd_store_kill(api->store, q, id, k.error, on_message, c);
        rd_request_free(k.doc);
        return rc;
    }
    case RD_ROUTE_DELETE:
        return rd_store_delete(api->store, q, id, on_deleted, c);
    case RD_ROUTE_REPLAY_MANY:
        r = rd_request_replay(req->body, req->body_len, &c->replay, &errs);
        if (r != RD_REQ_OK) break;
        return replay_next(c);
    case RD_ROUTE_STATS: {
        int top;
        r = rd_request_stats(req->query, req->query_len, &top, &errs);
        if (r != RD_REQ_OK) break;
        return rd_store_stats(api->store, q, top, on_stats, c);
    }
    case RD_ROUTE_REPLAY:
        r = rd_request_empty(req->body, req->body_len);
        if (r != RD_REQ_OK) break;
        return rd_store_replay(api->store, q, id, on_message, c);
    default: {
        rd_store_result_t bad = { .status = RD_STORE_ERROR };
        respond_store_failure(c, &bad);
        return 1;
    }
    }
    answer_parse_failure(c, r, &errs);
    return 1;
}

static void serve_ui(call_t *c)
{
    const rd_http_request_t *req = c->req;
    if (req->path_len == 3) {
        rd_buf_t headers = RD_BUF_INIT;
        rd_buf_printf(&headers, "Location: /ui/\r\n%s", rd_ui_headers);
        rd_http_respond(c->ex, 301, NULL, headers.data, NULL, 0);
        rd_buf_free(&headers);
        call_free(c);
        return;
    }
    const rd_ui_asset_t *a = rd_ui_find(req->path, req->path_len);
    if (a == NULL) {
        respond_problem(c, RD_PROBLEM_NOT_FOUND, "The console has no such file.", NULL, NULL);
        return;
    }
    rd_http_respond(c->ex, 200, a->content_type, rd_ui_headers, a->data, a->len);
    call_free(c);
}

void rd_api_handle(rd_http_exchange_t *ex, const rd_http_request_t *req, void *ctx)
{
    call_t *c = rd_calloc(1, sizeof *c);
    c->api = ctx;
    c->ex = ex;
    c->req = req;

    rd_route_outcome_t outcome = rd_router_match(req->method, req->path, req->path_len,
                                                 &c->match);
    /* Auth comes before any routing answer, so that without the token not
     * even the shape of the API shows; /healthz and the console's files stay
     * public. */
    bool public_route = outcome == RD_ROUTE_MATCHED && (c->match.route == RD_ROUTE_HEALTHZ ||
                                                        c->match.route == RD_ROUTE_UI);
    if (!public_route && !rd_auth_check(c->api->auth_token, req->authorization)) {
        respond_problem(c, RD_PROBLEM_UNAUTHORIZED,
                        req->authorization ? "The bearer token is wrong."
                                           : "This server needs 'Authorization: Bearer <token>'.",
                        NULL, "WWW-Authenticate: Bearer realm=\"retryd\"\r\n");
        return;
    }
    switch (outcome) {
    case RD_ROUTE_NO_PATH:
        respond_problem(c, RD_PROBLEM_NOT_FOUND, "No route matches this path.", NULL, NULL);
        return;
    case RD_ROUTE_BAD_ID:
        respond_problem(c, RD_PROBLEM_NOT_FOUND, "Message ids are positive integers.", NULL,
                        NULL);
        return;
    case RD_ROUTE_NO_METHOD: {
        char allow[96];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", c->match.allow);
        char detail[128];
        snprintf(detail, sizeof detail, "This path accepts %s.", c->match.allow);
        respond_problem(c, RD_PROBLEM_METHOD_NOT_ALLOWED, detail, NULL, allow);
        return;
    }
    case RD_ROUTE_MATCHED:
        break;
    }

    /* The console's files are public: the page asks for the token itself. */
    if (c->match.route == RD_ROUTE_UI) {
        serve_ui(c);
        return;
    }
    if (c->match.route == RD_ROUTE_HEALTHZ) {
        rd_json_t *doc = rd_json_new_object();
        rd_json_set_string(doc, "status", "ok");
        respond_json(c, 200, doc, NULL);
        return;
    }
    if (c->match.route == RD_ROUTE_READYZ) {
        if (rd_store_ping(c->api->store, on_pinged, c) != 0) respond_unavailable(c);
        return;
    }
    if (c->match.route == RD_ROUTE_QUEUES || c->match.route == RD_ROUTE_METRICS) {
        list_queues(c);
        return;
    }

    rd_field_errors_t errs = { .count = 0 };
    if (!c->match.queue_decoded) {
        rd_field_errors_add(&errs, "queue", "invalid", "queue has a broken percent-escape.");
        respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The queue name is invalid.", &errs,
                        NULL);
        return;
    }
    if (!rd_request_queue_name(c->match.queue, c->match.queue_len, &errs)) {
        respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The queue name is invalid.", &errs,
                        NULL);
        return;
    }
    if (dispatch(c) < 0) respond_unavailable(c);
}
