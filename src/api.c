/* api.c - the route table and one handler per route (README.md "HTTP API").
 *
 * A handler validates its input (request.c), starts its store operation and
 * hands the store's return code to rd_api_started(): the store's callback answers
 * (respond_json, or respond_store_failure for every store outcome other than
 * OK), and a store that could not start answers 503 through rd_api_started(). */
#include "retryd/api.h"
#include "retryd/api_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/shard_list.h"
#include "retryd/shard_stats.h"
#include "retryd/handback.h"
#include "retryd/sqs.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/jsonw.h"
#include "retryd/log.h"
#include "retryd/metrics.h"
#include "retryd/policy.h"
#include "retryd/problem.h"
#include "retryd/queue_clear.h"
#include "retryd/redrive.h"
#include "retryd/replay.h"
#include "retryd/request.h"
#include "retryd/router.h"
#include "retryd/ui.h"

typedef rd_call_t call_t;

/* 200/201 with one message (lease_token only when with_token). */
static void respond_message(call_t *c, int status, const rd_message_t *m, bool with_token,
                            const char *extra_headers)
{
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_message_write_json(&w, m, c->match.queue, c->match.queue_len, with_token);
    rd_api_respond_written(c, status, extra_headers);
}

/* ---------------------------------------------------------------- store callbacks */

static void on_message(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    if (c->notify) {
        rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
        rd_waiters_notify(c->api->waiters, q);
    }
    if (res->count != 1) {
        rd_store_head_t bad = { .status = RD_STORE_ERROR };
        rd_api_respond_store_failure(c, &bad);
        return;
    }
    respond_message(c, 200, &res->messages[0], false, NULL);
}

static void on_enqueued(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    if (res->head.status == RD_STORE_TOO_LARGE) {
        /* 413 on the field, naming the queue policy's limit. */
        char why[160];
        snprintf(why, sizeof why, "payload must be at most %lld bytes (the queue policy's "
                 "max_payload_bytes).", res->payload_limit);
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "payload", "invalid", why);
        rd_api_respond_problem(c, RD_PROBLEM_PAYLOAD_TOO_LARGE,
                               "The payload is longer than the queue allows.", &errs, NULL);
        return;
    }
    if (rd_api_respond_store_failure(c, &res->head)) return;
    const rd_message_t *m = &res->messages[0];
    if (res->head.status == RD_STORE_DUPLICATE) {
        /* Idempotent repeat: the original, 200, nothing created. */
        if (m->status != RD_STATUS_UNKNOWN) {
            respond_message(c, 200, m, false, NULL);
            return;
        }
        rd_jsonw_t w;  /* the original was deleted by retention */
        rd_api_begin_json(c, &w);
        rd_jsonw_object_open(&w);
        rd_jsonw_key(&w, "id");
        rd_jsonw_int(&w, m->id);
        rd_jsonw_key(&w, "queue");
        rd_jsonw_stringn(&w, c->match.queue, c->match.queue_len);
        rd_jsonw_key(&w, "status");
        rd_jsonw_null(&w);
        rd_jsonw_key(&w, "deleted");
        rd_jsonw_bool(&w, true);
        rd_jsonw_object_close(&w);
        rd_api_respond_written(c, 200, NULL);
        return;
    }
    if (m->status == RD_STATUS_PENDING && m->retry_after_ms < 0) {
        rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
        rd_waiters_notify(c->api->waiters, q);
    }
    rd_buf_t location = RD_BUF_INIT;
    rd_buf_printf(&location, "Location: %.*s/%lld\r\n", (int)c->req->path_len, c->req->path,
                  m->id);
    respond_message(c, 201, m, false, location.data);
    rd_buf_free(&location);
}

/* Claimed messages while their answer is on its way: if it cannot be
 * delivered (the client reset), they go straight back (handback.h). */
static void release_if_undelivered(call_t *c, const rd_message_t *messages, size_t count)
{
    rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
    rd_handback_if_undelivered(c->ex, &c->api->store, q, messages, count);
}

/* The member "messages": [...] of an answer's object. */
static void write_messages(const call_t *c, rd_jsonw_t *w, const rd_message_t *messages,
                           size_t count, bool with_token)
{
    rd_jsonw_key(w, "messages");
    rd_jsonw_array_open(w);
    for (size_t i = 0; i < count; i++)
        rd_message_write_json(w, &messages[i], c->match.queue, c->match.queue_len, with_token);
    rd_jsonw_array_close(w);
}

static void on_claimed(const rd_store_messages_t *res, void *arg);

/* A claim that gave no wait_seconds and got nothing waits the queue policy's
 * wait_seconds (docs/reference.md "Claim"), parked as a long-poll. Returns
 * whether it took the call over. */
static bool wait_by_policy(call_t *c, const rd_store_messages_t *res)
{
    if (res->count != 0 || c->wait_ms >= 0 || c->api->waiters == NULL) return false;
    rd_store_queue_t q = rd_api_queue_of(c);
    if (res->policy_wait_ms <= 0) return false;
    c->wait_ms = res->policy_wait_ms;
    rd_waiters_park(c->api->waiters, q, c->lease, c->count, c->worker, c->wait_ms, c->ex,
                    on_claimed, c);
    return true;
}

static void on_claimed(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    if (wait_by_policy(c, res)) return;
    if (res->count == 0) {
        rd_http_respond(c->ex, 204, NULL, NULL, NULL, 0);
        rd_api_call_free(c);
        return;
    }
    release_if_undelivered(c, res->messages, res->count);
    if (!c->batch) {
        respond_message(c, 200, &res->messages[0], true, NULL);
        return;
    }
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    write_messages(c, &w, res->messages, res->count, true);
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}

/* A claim sent through the coalescer as a settle-and-claim of no settlements
 * (it may share a call with others: docs/coalescing.md): answered as a claim. */
static void on_claimed_together(const rd_store_settled_t *res, void *arg)
{
    rd_store_messages_t claimed = { .head = res->head, .messages = res->messages,
                                    .count = res->count,
                                    .policy_wait_ms = res->policy_wait_ms };
    on_claimed(&claimed, arg);
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
static void respond_settled(call_t *c, const rd_message_t *messages, size_t count)
{
    if (count > 0) release_if_undelivered(c, messages, count);
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "settled");
    rd_jsonw_array_open(&w);
    for (size_t i = 0; i < c->nsettle; i++) {
        rd_jsonw_object_open(&w);
        rd_jsonw_key(&w, "id");
        rd_jsonw_int(&w, c->settle_ids[i]);
        rd_jsonw_key(&w, "status");
        rd_jsonw_string(&w, c->settled[i]);
        rd_jsonw_object_close(&w);
    }
    rd_jsonw_array_close(&w);
    write_messages(c, &w, messages, count, true);
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}

/* The claim a settle-and-claim parked for: its settlements stand whatever
 * happens to it, so a claim that failed (Redis went away meanwhile) answers
 * with no messages, never an error that would hide them. */
static void on_settle_waited(const rd_store_messages_t *res, void *arg)
{
    call_t *c = arg;
    if (res->head.status == RD_STORE_OK) {
        respond_settled(c, res->messages, res->count);
        return;
    }
    rd_warn("api: the long-poll claim after a settlement failed (status %d); answering no "
            "messages", (int)res->head.status);
    respond_settled(c, NULL, 0);
}

static void on_settle_claimed(const rd_store_settled_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    if (res->settled != c->nsettle) {
        rd_error("api: settle_claim answered %zu outcomes for %zu settlements", res->settled,
                 c->nsettle);
        rd_store_head_t bad = { .status = RD_STORE_ERROR };
        rd_api_respond_store_failure(c, &bad);
        return;
    }
    c->settled = rd_malloc(c->nsettle * sizeof *c->settled);
    for (size_t i = 0; i < c->nsettle; i++) api_code(res->outcomes[i], c->settled[i]);
    /* Settled at once; with wait_seconds (none given: the queue policy's) and
     * nothing claimable, the claim waits as a plain long-poll claim does. */
    if (c->wait_ms < 0 && res->count == 0 && c->count > 0) c->wait_ms = res->policy_wait_ms;
    if (res->count == 0 && c->wait_ms > 0 && c->api->waiters) {
        rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
        rd_waiters_park(c->api->waiters, q, c->lease, c->count, c->worker, c->wait_ms, c->ex,
                        on_settle_waited, c);
        return;
    }
    respond_settled(c, res->messages, res->count);
}

static void on_listed(const rd_store_list_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    write_messages(c, &w, res->messages, res->count, false);
    rd_jsonw_key(&w, "next_cursor");
    if (res->next_cursor.len) rd_jsonw_stringn(&w, res->next_cursor.ptr, res->next_cursor.len);
    else rd_jsonw_null(&w);
    rd_jsonw_key(&w, "total");
    rd_jsonw_int(&w, res->total);
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}

static void on_acked(const rd_store_outcomes_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    if (c->notify) {
        rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
        rd_waiters_notify(c->api->waiters, q);
    }
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
    rd_api_respond_json(c, 200, doc, NULL);
}

/* A batch acknowledgement with snoozes, sent as a settle-and-claim of count
 * 0: answered as succeed_many's. */
static void on_acked_settled(const rd_store_settled_t *res, void *arg)
{
    rd_store_outcomes_t acked = { .head = res->head, .outcomes = res->outcomes,
                                  .count = res->settled };
    on_acked(&acked, arg);
}

static void on_deleted(const rd_store_head_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, res)) return;
    rd_http_respond(c->ex, 204, NULL, NULL, NULL, 0);
    rd_api_call_free(c);
}

/* A batch replay goes on while its answer can still reach the client: a
 * client that only half-closed its side still reads it. */
static bool client_not_gone(void *arg)
{
    call_t *c = arg;
    return !rd_http_exchange_client_gone(c->ex);
}

/* A batch replay that stopped part way: its problem says how many were
 * replayed, never "nothing was done". */
static void respond_replay_stopped(call_t *c, const rd_store_replayed_t *res)
{
    char detail[256];
    const char *why = "Redis is not reachable or the client has gone";
    rd_problem_t p = RD_PROBLEM_BACKEND_UNAVAILABLE;
    const char *headers = "Retry-After: 1\r\n";
    if (res->head.status == RD_STORE_LOST) {
        why = "the link to Redis dropped during a call, whose letters may or may not have "
              "been replayed";
        p = RD_PROBLEM_OUTCOME_UNKNOWN;
    } else if (res->head.status != RD_STORE_UNAVAILABLE) {
        rd_error("api: Redis error on %.*s: %.*s", (int)c->req->path_len, c->req->path,
                 (int)res->head.detail.len, res->head.detail.ptr);
        why = "Redis answered with an error (see the log)";
        p = RD_PROBLEM_INTERNAL;
        headers = NULL;
    }
    snprintf(detail, sizeof detail,
             "The batch replay stopped after %lld dead letters were replayed: %s. The rest are "
             "still dead; replay again to go on.", res->replayed, why);
    rd_api_respond_problem(c, p, detail, NULL, headers);
}

static void on_replayed_all(const rd_store_replayed_t *res, void *arg)
{
    call_t *c = arg;
    rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
    if (res->replayed > 0) rd_waiters_notify(c->api->waiters, q);
    if (res->head.status != RD_STORE_OK && res->head.status != RD_STORE_DUPLICATE &&
        res->replayed > 0) {
        respond_replay_stopped(c, res);
        return;
    }
    if (rd_api_respond_store_failure(c, &res->head)) return;
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_int(doc, "replayed", res->replayed);
    rd_api_respond_json(c, 200, doc, NULL);
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

/* The pause shows beside the counts (docs/reference.md "Pause, caps and rate limits"). */
/* paused, and sqs: whether the queue was made through the SQS endpoint
 * (docs/sqs.md; the console marks those). */
static void set_paused(rd_json_t *o, const rd_queue_metrics_t *m)
{
    rd_json_set_bool(o, "paused", m->paused == 1);
    rd_json_set_bool(o, "sqs", m->sqs == 1);
}

static void on_series(const rd_store_series_t *res, void *arg);

static void on_stats(const rd_store_stats_result_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    const rd_queue_stats_t *st = &res->stats;
    rd_queue_metrics_t m = { .name = NULL };
    rd_metrics_from_stats(&m, st);
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_stringn(doc, "queue", c->match.queue, c->match.queue_len);
    set_paused(doc, &m);
    rd_json_t *counts = counts_json(&m);
    rd_json_set_int(counts, "ready", m.ready);
    rd_json_set_int(counts, "scheduled", m.scheduled);
    rd_json_set_int(counts, "redriving", st->redriving);
    rd_json_set(doc, "counts", counts);
    rd_json_t *totals = rd_json_new_object();
#define ALWAYS(name, help) rd_json_set_int(totals, #name, m.name);
    RD_STATS_COUNTERS(ALWAYS)
#undef ALWAYS
    /* The other counters of the stats hash (retention, deletes, purges, ...),
     * when it has them. */
    for (size_t i = 0; i + 1 < st->totals_len; i += 2) {
        const rd_str_t *k = &st->totals[i];
#define WHEN_PRESENT(name)                                                             \
        if (k->len == sizeof #name - 1 && memcmp(k->ptr, #name, k->len) == 0)          \
            rd_json_set_int(totals, #name,                                             \
                            rd_str_to_ll(st->totals[i + 1].ptr, st->totals[i + 1].len));
        RD_STATS_MORE_COUNTERS(WHEN_PRESENT)
#undef WHEN_PRESENT
    }
    rd_json_set(doc, "totals", totals);
    /* The dead-letter rules' counters, by position (docs/reference.md "Recovery rules"). */
    rd_json_t *rules = rd_json_new_array();
    for (size_t r = 0; r < RD_STATS_RULES_MAX; r++) {
        if (!(m.rules_seen & (1UL << r))) continue;
        rd_json_t *e = rd_json_new_object();
        rd_json_set_int(e, "rule", (long long)r);
        rd_json_set_int(e, "retried", m.rule_retried[r]);
        rd_json_set_int(e, "dead", m.rule_dead[r]);
        rd_json_append(rules, e);
    }
    rd_json_set(doc, "dead_letter_rules", rules);
    rd_json_set_int(doc, "dead_last_24h", st->dead_last_24h);
    /* Fairness groups with messages now (docs/reference.md "Fairness groups"). */
    rd_json_set_int(doc, "groups", st->groups);
    rd_json_t *top = rd_json_new_array();
    for (size_t i = 0; i + 1 < st->top_errors_len; i += 2) {
        rd_json_t *e = rd_json_new_object();
        rd_json_set_stringn(e, "error", st->top_errors[i].ptr, st->top_errors[i].len);
        rd_json_set_int(e, "count",
                        rd_str_to_ll(st->top_errors[i + 1].ptr, st->top_errors[i + 1].len));
        rd_json_append(top, e);
    }
    rd_json_set(doc, "top_errors", top);
    if (c->series_of) {
        /* The series after the stats: a sharded queue's view is known by
         * now (rd_shard_stats learns it), so the series need no read of it. */
        c->series = doc;
        rd_api_started(c, rd_shard_series(c->api->store, rd_api_queue_of(c), c->series_of,
                                          on_series, c));
        return;
    }
    rd_api_respond_json(c, 200, doc, NULL);
}


/* GET stats?series=: the series came (docs/series.md), after the stats. */
static void on_series(const rd_store_series_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    static const char *const names[RD_SERIES_COUNT] = { "enqueued", "succeeded", "failed", "dead",
                                                        "replayed" };
    rd_json_t *o = rd_json_new_object();
    rd_json_set_string(o, "resolution", res->step_ms == 60000 ? "minute" : "hour");
    rd_json_set_int(o, "start", res->start_ms);
    rd_json_set_int(o, "step_seconds", res->step_ms / 1000);
    for (size_t i = 0; i < RD_SERIES_COUNT; i++) {
        rd_json_t *a = rd_json_new_array();
        for (size_t j = 0; j < res->len; j++)
            rd_json_append(a, rd_json_new_int(res->values[i * res->len + j]));
        rd_json_set(o, names[i], a);
    }
    rd_json_t *doc = c->series;
    c->series = NULL;
    rd_json_set(doc, "series", o);
    rd_api_respond_json(c, 200, doc, NULL);
}

/* ---------------------------------------------------------------- every queue */

/* /metrics for a token limited to queue patterns: its queues' families, the
 * Redis round trips and parked claims of this process; no totals over every
 * queue (docs/security.md "Tokens"). */
static void render_limited_metrics(call_t *c, const rd_fanout_queues_t *res, rd_buf_t *text)
{
    rd_queue_metrics_t *seen = rd_calloc(res->count + 1, sizeof *seen);
    size_t n = 0;
    for (size_t i = 0; i < res->count; i++)
        if (rd_api_sees_queue(c, res->queues[i].name, res->queues[i].name_len))
            seen[n++] = res->queues[i];   /* shallow: the names stay res's */
    rd_metrics_render(text, seen, n, rd_store_rtt(c->api->store),
                      c->api->waiters ? rd_waiters_count(c->api->waiters) : 0);
    rd_metrics_render_snapshot_age(text, res->age_ms);
    rd_free(seen);
}

/* GET /queues and /metrics: a page of the registry with each queue's numbers. */
static void on_queues(const rd_fanout_queues_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    if (c->metrics && rd_api_limited(c)) {
        rd_buf_t text = RD_BUF_INIT;
        render_limited_metrics(c, res, &text);
        rd_http_respond(c->ex, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text.data,
                        text.len);
        rd_buf_free(&text);
        rd_api_call_free(c);
        return;
    }
    if (c->metrics) {
        rd_buf_t text = RD_BUF_INIT;
        rd_metrics_render(&text, res->queues, res->count, rd_store_rtt(c->api->store),
                          c->api->waiters ? rd_waiters_count(c->api->waiters) : 0);
        long long exported = 0;
        for (size_t i = 0; i < res->count; i++) exported += res->queues[i].ok;
        rd_metrics_render_registry(&text, res->total, res->total - exported);
        rd_metrics_render_snapshot_age(&text, res->age_ms);
        if (c->api->coalescer) rd_coalescer_render_metrics(c->api->coalescer, &text);
        if (c->api->enqueues) rd_enqueue_lines_render_metrics(c->api->enqueues, &text);
        rd_api_batch_render_metrics(c->api, &text);
        if (c->api->alerts) rd_alerts_render_metrics(c->api->alerts, &text);
        if (c->api->http) rd_http_server_render_metrics(c->api->http, &text);
        if (c->api->sqs) rd_sqs_render_metrics(c->api->sqs, &text);
        rd_http_respond(c->ex, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text.data,
                        text.len);
        rd_buf_free(&text);
        rd_api_call_free(c);
        return;
    }
    rd_json_t *doc = rd_json_new_object();
    rd_json_t *list = rd_json_new_array();
    for (size_t i = 0; i < res->count; i++) {
        if (!res->queues[i].ok ||
            !rd_api_sees_queue(c, res->queues[i].name, res->queues[i].name_len))
            continue;
        rd_json_t *q = rd_json_new_object();
        rd_json_set_stringn(q, "name", res->queues[i].name, res->queues[i].name_len);
        rd_json_set(q, "counts", counts_json(&res->queues[i]));
        set_paused(q, &res->queues[i]);
        rd_json_set_int(q, "dead_last_24h", res->queues[i].dead_last_24h);
        rd_json_append(list, q);
    }
    rd_json_set(doc, "queues", list);
    if (res->next_cursor.len) rd_json_set_stringn(doc, "next_cursor", res->next_cursor.ptr,
                                                  res->next_cursor.len);
    else rd_json_set_null(doc, "next_cursor");
    /* The registry's size would tell a limited token that other queues exist. */
    if (rd_api_limited(c)) rd_json_set_null(doc, "total");
    else rd_json_set_int(doc, "total", res->total);
    rd_api_respond_json(c, 200, doc, NULL);
}

static void on_pinged(const rd_store_head_t *res, void *arg)
{
    call_t *c = arg;
    if (res->status != RD_STORE_OK) {
        rd_api_respond_unavailable(c);
        return;
    }
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_string(doc, "status", "ready");
    rd_api_respond_json(c, 200, doc, NULL);
}

/* ---------------------------------------------------------------- handlers */

static void handle_healthz(call_t *c)
{
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_string(doc, "status", "ok");
    rd_api_respond_json(c, 200, doc, NULL);
}

static void handle_readyz(call_t *c)
{
    /* In a cluster not before every master has had its first connect
     * attempt (docs/cluster.md "Readiness"), though PING finds one at once. */
    if (!rd_store_started(c->api->store)) {
        rd_api_respond_unavailable(c);
        return;
    }
    rd_api_started(c, rd_store_ping(c->api->store, on_pinged, c));
}

static void handle_enqueue(call_t *c)
{
    rd_enqueue_req_t e;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_enqueue(c->req->body, c->req->body_len, &e, &errs);
    if (r == RD_REQ_BATCH) {
        rd_api_enqueue_batch(c, &e);
        return;
    }
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    rd_enqueue_t in = { .payload = e.payload, .len = e.payload_len,
                        .max_retries = e.max_retries_given ? e.max_retries : 0,
                        .delay_ms = e.delay_ms, .ttl_ms = e.ttl_ms, .priority = e.priority,
                        .group = e.group, .idempotency_key = e.idempotency_key };
    int rc = c->api->enqueues
                 ? rd_enqueue_lines_enqueue(c->api->enqueues, rd_api_queue_of(c), &in, on_enqueued, c)
                 : rd_store_enqueue(c->api->store, rd_api_queue_of(c), &in, on_enqueued, c);
    rd_request_free(e.doc);
    rd_api_started(c, rc);
}

static void handle_list(call_t *c)
{
    rd_list_req_t l;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_list(c->req->query, c->req->query_len, &l, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    rd_shard_list_args_t a = { .status = l.status, .limit = l.limit, .cursor = l.cursor,
                               .error_contains = l.error_contains, .since_ms = l.since_ms,
                               .until_ms = l.until_ms };
    rd_api_started(c, rd_shard_list(c->api->store, rd_api_queue_of(c), &a, on_listed, c));
}

static void handle_get(call_t *c)
{
    rd_api_started(c, rd_store_get(c->api->store, rd_api_queue_of(c), c->match.id, on_message, c));
}

static void handle_claim(call_t *c)
{
    rd_api_t *api = c->api;
    rd_store_queue_t q = rd_api_queue_of(c);
    rd_claim_req_t cl;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_claim(c->req->body, c->req->body_len, c->req->query,
                                         c->req->query_len, api->cfg->lease_ms, &cl, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    c->batch = cl.batch;
    /* A lease the request did not give is the daemon's default, which the
     * queue's policy overrides (store.h, rd_lease_t). */
    rd_lease_t lease = { cl.lease_ms, cl.lease_given };
    if (cl.nsettle > 0) {
        c->nsettle = cl.nsettle;
        c->settle_ids = rd_malloc(cl.nsettle * sizeof *c->settle_ids);
        for (size_t i = 0; i < cl.nsettle; i++) c->settle_ids[i] = cl.settle[i].id;
        c->lease = lease;
        c->wait_ms = cl.wait_ms;
        c->count = cl.count;
        if (cl.worker) c->worker = rd_strdup(cl.worker);
        int rc = api->coalescer
                     ? rd_coalescer_settle_claim(api->coalescer, q, lease, cl.count, cl.worker,
                                                 cl.nsettle, cl.settle, on_settle_claimed, c)
                     : rd_store_settle_claim(api->store, q, lease, cl.count, cl.worker,
                                             cl.nsettle, cl.settle, on_settle_claimed, c);
        rd_request_free(cl.doc);
        rd_api_started(c, rc);
        return;
    }
    /* The worker outlives the parsed body only as the waiter's copy, or as
     * the call's (a claim without wait_seconds may claim again or park by
     * the policy: wait_by_policy). */
    char *worker = cl.worker ? rd_strdup(cl.worker) : NULL;
    rd_request_free(cl.doc);
    c->lease = lease;
    c->count = cl.count;
    c->wait_ms = cl.wait_ms;
    if (cl.wait_ms > 0 && api->waiters) {
        if (!rd_store_ready(api->store)) {
            rd_free(worker);
            rd_api_started(c, -1);
            return;
        }
        rd_waiters_park(api->waiters, q, lease, cl.count, worker, cl.wait_ms, c->ex,
                        on_claimed, c);
        rd_free(worker);
        return;
    }
    c->worker = worker;   /* freed with the call */
    rd_api_started(c, api->coalescer
                   ? rd_coalescer_settle_claim(api->coalescer, q, lease, cl.count, worker, 0,
                                               NULL, on_claimed_together, c)
                   : rd_store_claim(api->store, q, lease, cl.count, worker, on_claimed, c));
}

/* The transitions of one leased message answer "... needs a processing message". */
static void leased_transition(call_t *c, const char *verb)
{
    c->verb = verb;
    c->needs = "a processing";
}

static void handle_succeed(call_t *c)
{
    leased_transition(c, "succeed");
    rd_settle_req_t s;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_succeed(c->req->body, c->req->body_len, &s, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    int rc = rd_store_succeed(c->api->store, rd_api_queue_of(c), c->match.id, s.lease_token,
                              on_message, c);
    rd_request_free(s.doc);
    rd_api_started(c, rc);
}

static void handle_fail(call_t *c)
{
    leased_transition(c, "fail");
    rd_settle_req_t s;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_fail(c->req->body, c->req->body_len, &s, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    int rc = rd_store_fail(c->api->store, rd_api_queue_of(c), c->match.id, s.lease_token, s.error,
                           s.retryable, s.retry_after_ms, on_message, c);
    rd_request_free(s.doc);
    rd_api_started(c, rc);
}

static void handle_snooze(call_t *c)
{
    leased_transition(c, "snooze");
    rd_settle_req_t s;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_snooze(c->req->body, c->req->body_len, &s, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    /* Due now: this instance's long-polls may take it at once (their claim
     * promotes it); the timer hint brings the others' (docs/reference.md "Snooze"). */
    c->notify = s.delay_ms == 0;
    int rc = rd_store_snooze(c->api->store, rd_api_queue_of(c), c->match.id, s.lease_token,
                             s.delay_ms,
                             on_message, c);
    rd_request_free(s.doc);
    rd_api_started(c, rc);
}

static void handle_extend(call_t *c)
{
    leased_transition(c, "extend");
    rd_settle_req_t s;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_extend(c->req->body, c->req->body_len, c->api->cfg->lease_ms,
                                          &s, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    rd_lease_t lease = { s.lease_ms, s.lease_given };
    int rc = rd_store_extend(c->api->store, rd_api_queue_of(c), c->match.id, s.lease_token, lease,
                             on_message, c);
    rd_request_free(s.doc);
    rd_api_started(c, rc);
}

static void handle_replay(call_t *c)
{
    c->verb = "replay";
    c->needs = "a dead";
    c->notify = true;
    rd_req_result_t r = rd_request_empty(c->req->body, c->req->body_len);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, NULL);
        return;
    }
    rd_api_started(c, rd_store_replay(c->api->store, rd_api_queue_of(c), c->match.id, on_message,
                                      c));
}

static void handle_kill(call_t *c)
{
    c->verb = "kill";
    c->needs = "a pending or processing";
    rd_settle_req_t k;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_kill(c->req->body, c->req->body_len, &k, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    int rc = rd_store_kill(c->api->store, rd_api_queue_of(c), c->match.id, k.error, on_message, c);
    rd_request_free(k.doc);
    rd_api_started(c, rc);
}

static void handle_delete(call_t *c)
{
    c->verb = "delete";
    c->needs = "a non-processing";
    rd_api_started(c, rd_store_delete(c->api->store, rd_api_queue_of(c), c->match.id, on_deleted,
                                      c));
}

/* DELETE /queues/{q}: every key of the queue, in bounded calls
 * (src/queue_clear.c), then its registry entries. */
static void on_dropped(const rd_store_cleared_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    rd_http_respond(c->ex, 204, NULL, NULL, NULL, 0);
    rd_api_call_free(c);
}

static void handle_drop_queue(call_t *c)
{
    rd_api_started(c, rd_queue_clear(c->api->store, rd_api_queue_of(c), RD_QUEUE_DROP,
                                     client_not_gone, on_dropped, c));
}

static void handle_succeed_many(call_t *c)
{
    rd_field_errors_t errs = { .count = 0 };
    c->ack = rd_malloc(sizeof *c->ack);
    rd_req_result_t r = rd_request_ack(c->req->body, c->req->body_len, c->ack, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    const rd_ack_req_t *ack = c->ack;
    if (!ack->any_snoozed) {
        rd_api_started(c, rd_store_succeed_many(c->api->store, rd_api_queue_of(c), ack->count,
                                                ack->ids,
                                         ack->tokens, on_acked, c));
        return;
    }
    /* With a snooze among them, the batch is a settle-and-claim that claims
     * nothing: one atomic call still, each item as the snooze route or
     * succeed_many would apply it (docs/reference.md "Snooze"). */
    rd_settlement_t *items = rd_calloc(ack->count, sizeof *items);
    bool due_now = false;
    for (size_t i = 0; i < ack->count; i++) {
        items[i].id = ack->ids[i];
        items[i].lease_token = ack->tokens[i];
        items[i].retryable = true;
        items[i].snoozed = ack->snoozed[i];
        items[i].delay_ms = ack->delay_ms[i];
        due_now = due_now || (ack->snoozed[i] && ack->delay_ms[i] == 0);
    }
    c->notify = due_now;
    rd_lease_t unused = { c->api->cfg->lease_ms, true };
    int rc = rd_store_settle_claim(c->api->store, rd_api_queue_of(c), unused, 0, NULL, ack->count,
                                   items,
                                   on_acked_settled, c);
    rd_free(items);
    rd_api_started(c, rc);
}

/* POST /queues/{q}/replay with "to": a redrive (src/redrive.c). */
static void on_redriven(const rd_store_replayed_t *res, void *arg)
{
    call_t *c = arg;
    rd_store_queue_t to = { .name = c->replay.to, .len = c->replay.to_len };
    if (res->replayed > 0) rd_waiters_notify(c->api->waiters, to);
    on_replayed_all(res, arg);
}

static void handle_redrive(call_t *c)
{
    if (c->replay.to_len == c->match.queue_len &&
        memcmp(c->replay.to, c->match.queue, c->replay.to_len) == 0) {
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "to", "invalid",
                            "to must name another queue; replay in place without to.");
        rd_api_answer_parse_failure(c, RD_REQ_INVALID, &errs);
        return;
    }
    if (!rd_api_authorize_queue(c, c->replay.to, c->replay.to_len, "to")) return;
    rd_store_queue_t to = { .name = c->replay.to, .len = c->replay.to_len };
    rd_api_started(c, rd_redrive_run(c->api->store, rd_api_queue_of(c), to, c->replay.mode,
                                     c->replay.ids,
                              c->replay.count, c->replay.needle, client_not_gone, on_redriven,
                              c));
}

static void handle_replay_many(call_t *c)
{
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_replay(c->req->body, c->req->body_len, &c->replay, &errs);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    if (c->replay.to) {
        handle_redrive(c);
        return;
    }
    rd_api_started(c, rd_replay_all(c->api->store, rd_api_queue_of(c), c->replay.mode,
                                    c->replay.ids,
                             c->replay.count, c->replay.needle, client_not_gone,
                             on_replayed_all, c));
}

static void handle_stats(call_t *c)
{
    const char *series;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_stats(c->req->query, c->req->query_len, &c->top, &errs);
    rd_req_result_t rs = rd_request_series(c->req->query, c->req->query_len, &series, &errs);
    if (r == RD_REQ_OK) r = rs;
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    c->series_of = series;
    rd_api_started(c, rd_shard_stats(c->api->store, rd_api_queue_of(c), c->top, on_stats, c));
}

/* GET /queues: a page of the registry, each queue's counts. */
static void handle_queues(call_t *c)
{
    rd_queues_req_t q;
    rd_field_errors_t errs = { .count = 0 };
    if (rd_request_queues(c->req->query, c->req->query_len, &q, &errs) != RD_REQ_OK) {
        rd_api_respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The query has invalid fields.",
                               &errs,
                        NULL);
        return;
    }
    rd_api_started(c, rd_fanout_queues_stats(c->api->fanout, q.cursor, q.cursor_len, q.limit,
                                      on_queues, c));
}

/* GET /metrics: the first RD_METRICS_MAX_QUEUES queues, from the snapshot
 * every scrape shares (at most RD_METRICS_SNAPSHOT_MS old). */
static void handle_metrics(call_t *c)
{
    c->metrics = true;
    rd_api_started(c, rd_fanout_snapshot(c->api->fanout, RD_METRICS_SNAPSHOT_MS, on_queues, c));
}

/* GET /openapi.json: docs/openapi.json as built in; public, like /healthz. */
static void handle_openapi(call_t *c)
{
    rd_http_respond(c->ex, 200, "application/json", "Cache-Control: no-cache\r\n",
                    rd_openapi_json, strlen(rd_openapi_json));
    rd_api_call_free(c);
}

/* The console's files are public: the page asks for the token itself. */
static void handle_ui(call_t *c)
{
    const rd_http_request_t *req = c->req;
    if (req->path_len == 3) {
        rd_buf_t headers = RD_BUF_INIT;
        rd_buf_printf(&headers, "Location: /ui/\r\n%s", rd_ui_headers);
        rd_http_respond(c->ex, 301, NULL, headers.data, NULL, 0);
        rd_buf_free(&headers);
        rd_api_call_free(c);
        return;
    }
    const rd_ui_asset_t *a = rd_ui_find(req->path, req->path_len);
    if (a == NULL) {
        rd_api_respond_problem(c, RD_PROBLEM_NOT_FOUND, "The console has no such file.", NULL,
                               NULL);
        return;
    }
    rd_http_respond(c->ex, 200, a->content_type, rd_ui_headers, a->data, a->len);
    rd_api_call_free(c);
}

/* ---------------------------------------------------------------- the table */

/* Every route: a new one is a row here and its handler above. First match
 * wins; HEAD takes the GET rows. The last column is the role a token needs
 * (docs/security.md "Tokens"); the route's queue must be within its patterns. */
const rd_route_t rd_api_routes[] = {
    { RD_HTTP_GET, "/healthz", handle_healthz, RD_ROUTE_PUBLIC, RD_ROLE_ANY },
    { RD_HTTP_GET, "/readyz", handle_readyz, 0, RD_ROLE_ANY },
    { RD_HTTP_GET, "/openapi.json", handle_openapi, RD_ROUTE_PUBLIC, RD_ROLE_ANY },
    { RD_HTTP_GET, "/auth/whoami", rd_api_handle_whoami, 0, RD_ROLE_ANY },
    { RD_HTTP_POST, "/queues/{q}/messages", handle_enqueue, 0, RD_ROLE_PRODUCER },
    { RD_HTTP_GET, "/queues/{q}/messages", handle_list, 0, RD_ROLE_READER },
    { RD_HTTP_GET, "/queues/{q}/messages/{id}", handle_get, 0, RD_ROLE_READER },
    { RD_HTTP_POST, "/queues/{q}/claim", handle_claim, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/succeed", handle_succeed, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/fail", handle_fail, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/replay", handle_replay, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/snooze", handle_snooze, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/extend", handle_extend, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/succeed", handle_succeed_many, 0, RD_ROLE_WORKER },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/kill", handle_kill, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_DELETE, "/queues/{q}/messages/{id}", handle_delete, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_POST, "/queues/{q}/replay", handle_replay_many, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_GET, "/queues", handle_queues, 0, RD_ROLE_READER },
    { RD_HTTP_DELETE, "/queues/{q}", handle_drop_queue, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_GET, "/queues/{q}/stats", handle_stats, 0, RD_ROLE_READER },
    { RD_HTTP_GET, "/queues/{q}/groups", rd_api_handle_groups, 0, RD_ROLE_READER },
    { RD_HTTP_GET, "/queues/{q}/policy", rd_api_handle_policy_get, 0, RD_ROLE_READER },
    { RD_HTTP_PUT, "/queues/{q}/policy", rd_api_handle_policy_put, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_PATCH, "/queues/{q}/policy", rd_api_handle_policy_patch, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_POST, "/queues/{q}/pause", rd_api_handle_pause, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_POST, "/queues/{q}/resume", rd_api_handle_resume, 0, RD_ROLE_OPERATOR },
    { RD_HTTP_GET, "/metrics", handle_metrics, 0, RD_ROLE_READER },
    { RD_HTTP_GET, "/ui", handle_ui, RD_ROUTE_PUBLIC | RD_ROUTE_PREFIX, RD_ROLE_ANY },
};
const size_t rd_api_route_count = sizeof rd_api_routes / sizeof rd_api_routes[0];

/* The head hook (rd_http_head_fn): only requests with a body come here. The
 * route is known from the path, so the token's checks (src/api_auth.c) run
 * on it as the handler's would, before the body is read. */
bool rd_api_check_head(const rd_http_request_t *head, void *ctx, rd_http_refusal_t *refusal)
{
    const rd_api_t *api = ctx;
    if (api->tokens == NULL) return true;
    rd_route_match_t m;
    bool matched = rd_router_match(rd_api_routes, rd_api_route_count, head->method, head->path,
                                   head->path_len, &m) == RD_ROUTE_MATCHED;
    bool allowed = rd_api_head_allowed(api, head, matched ? &m : NULL, refusal);
    rd_route_match_free(&m);
    return allowed;
}

void rd_api_handle(rd_http_exchange_t *ex, const rd_http_request_t *req, void *ctx)
{
    call_t *c = rd_calloc(1, sizeof *c);
    c->api = ctx;
    c->ex = ex;
    c->req = req;

    rd_route_outcome_t outcome = rd_router_match(rd_api_routes, rd_api_route_count, req->method,
                                                 req->path, req->path_len, &c->match);
    /* Auth comes before any routing answer, so that without the token not
     * even the shape of the API shows; the public rows (/healthz,
     * /openapi.json and the console's files, none of which holds data)
     * need none (README, --auth-token-file). */
    bool public_route = outcome == RD_ROUTE_MATCHED && (c->match.route->flags & RD_ROUTE_PUBLIC);
    if (!rd_api_authenticate(c, public_route)) return;
    switch (outcome) {
    case RD_ROUTE_NO_PATH:
        rd_api_respond_problem(c, RD_PROBLEM_NOT_FOUND, "No route matches this path.", NULL, NULL);
        return;
    case RD_ROUTE_BAD_ID:
        rd_api_respond_problem(c, RD_PROBLEM_NOT_FOUND, "Message ids are positive integers.", NULL,
                        NULL);
        return;
    case RD_ROUTE_NO_METHOD: {
        char allow[96];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", c->match.allow);
        char detail[128];
        snprintf(detail, sizeof detail, "This path accepts %s.", c->match.allow);
        rd_api_respond_problem(c, RD_PROBLEM_METHOD_NOT_ALLOWED, detail, NULL, allow);
        return;
    }
    case RD_ROUTE_MATCHED:
        break;
    }

    /* Every {q} route: the queue name is checked before its handler runs. */
    if (c->match.queue) {
        rd_field_errors_t errs = { .count = 0 };
        if (!c->match.queue_decoded)
            rd_field_errors_add(&errs, "queue", "invalid", "queue has a broken percent-escape.");
        if (errs.count > 0 || !rd_request_queue_name(c->match.queue, c->match.queue_len, &errs)) {
            rd_api_respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The queue name is invalid.",
                                   &errs,
                            NULL);
            return;
        }
    }
    if (!public_route && !rd_api_authorize(c)) return;
    c->match.route->handler(c);
}
