/* api_batch.c - POST /queues/{q}/messages with {"messages": [...]}: a batch
 * enqueue (docs/reference.md "Batch enqueue"). Every item is checked as a
 * single enqueue's body is (request.c); the valid ones go to Redis in
 * order as enqueue_many calls of at most RD_ENQUEUE_MANY_MAX items
 * (enqueue_chunks.c); the answer is 200 {"results": [...]}, one entry per
 * item in request order, written as each call answers: {"status": 201 or
 * 200, "message": {...}}, or a problem of its own ({"status", "type",
 * "title", "detail"[, "errors"]}). */
#include "retryd/api_call.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/enqueue_chunks.h"
#include "retryd/jsonw.h"
#include "retryd/waiters.h"

typedef struct batch {
    rd_call_t *c;
    rd_enqueue_batch_req_t req;
    rd_enqueue_t *sent;         /* the valid items, in request order ... */
    size_t *index;              /* ... sent[i] is item index[i] */
    size_t nsent;
    size_t written;             /* items [0, written) are in the answer */
    bool ready;                 /* a message became claimable: wake this instance's long-polls */
    rd_buf_t out;               /* the answer, written across the calls */
    rd_jsonw_t w;
} batch_t;

static void batch_free(batch_t *b)
{
    rd_request_enqueue_batch_free(&b->req);
    rd_free(b->sent);
    rd_free(b->index);
    rd_buf_free(&b->out);
    rd_free(b);
}

/* An item's own problem: {"status", "type", "title", "detail"[, "errors"]},
 * the members of the problem+json a single enqueue would have answered. */
static void write_problem(batch_t *b, rd_problem_t p, const char *detail,
                          const rd_field_errors_t *errs)
{
    rd_jsonw_t *w = &b->w;
    char type[64];
    snprintf(type, sizeof type, "/problems/%s", rd_problem_slug(p));
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "status");
    rd_jsonw_int(w, rd_problem_status(p));
    rd_jsonw_key(w, "type");
    rd_jsonw_string(w, type);
    rd_jsonw_key(w, "title");
    rd_jsonw_string(w, rd_problem_title(p));
    rd_jsonw_key(w, "detail");
    rd_jsonw_string(w, detail);
    if (errs && errs->count > 0) {
        rd_jsonw_key(w, "errors");
        rd_jsonw_array_open(w);
        for (size_t i = 0; i < errs->count; i++) {
            rd_jsonw_object_open(w);
            rd_jsonw_key(w, "field");
            rd_jsonw_string(w, errs->items[i].field);
            rd_jsonw_key(w, "code");
            rd_jsonw_string(w, errs->items[i].code);
            rd_jsonw_key(w, "message");
            rd_jsonw_string(w, errs->items[i].message);
            rd_jsonw_object_close(w);
        }
        rd_jsonw_array_close(w);
    }
    rd_jsonw_object_close(w);
}

/* Items [b->written, upto) that were not sent: the invalid ones. */
static void write_invalid_until(batch_t *b, size_t upto)
{
    for (; b->written < upto; b->written++) {
        const rd_enqueue_req_t *it = &b->req.items[b->written];
        if (it->malformed)
            write_problem(b, RD_PROBLEM_MALFORMED_REQUEST,
                          "Each item of messages must be a JSON object, as the body of a single "
                          "enqueue.", NULL);
        else
            write_problem(b, RD_PROBLEM_VALIDATION_FAILED, "The message has invalid fields.",
                          &b->req.errs[b->written]);
    }
}

/* One item's enqueue, answered as a single enqueue's (api.c on_enqueued). */
static void write_result(batch_t *b, const rd_store_messages_t *res)
{
    rd_jsonw_t *w = &b->w;
    const rd_call_t *c = b->c;
    rd_store_status_t st = res->head.status;
    if (st == RD_STORE_TOO_LARGE) {
        char why[160];
        snprintf(why, sizeof why, "payload must be at most %lld bytes (the queue policy's "
                 "max_payload_bytes).", res->payload_limit);
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "payload", "invalid", why);
        write_problem(b, RD_PROBLEM_PAYLOAD_TOO_LARGE, "The payload is longer than the queue "
                      "allows.", &errs);
        return;
    }
    if (st == RD_STORE_RESHARD || st == RD_STORE_COPY || st == RD_STORE_MOVED ||
        st == RD_STORE_FULL) {
        write_problem(b, RD_PROBLEM_BACKEND_UNAVAILABLE, "The queue's shards changed while this "
                      "message was placed, or its shard is full; it was not enqueued.", NULL);
        return;
    }
    if ((st != RD_STORE_OK && st != RD_STORE_DUPLICATE) || res->count != 1) {
        write_problem(b, RD_PROBLEM_INTERNAL, "Redis answered with an error; see the log.", NULL);
        return;
    }
    const rd_message_t *m = &res->messages[0];
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "status");
    rd_jsonw_int(w, st == RD_STORE_OK ? 201 : 200);
    rd_jsonw_key(w, "message");
    if (st == RD_STORE_DUPLICATE && m->status == RD_STATUS_UNKNOWN) {
        /* The original was deleted by retention. */
        rd_jsonw_object_open(w);
        rd_jsonw_key(w, "id");
        rd_jsonw_int(w, m->id);
        rd_jsonw_key(w, "queue");
        rd_jsonw_stringn(w, c->match.queue, c->match.queue_len);
        rd_jsonw_key(w, "status");
        rd_jsonw_null(w);
        rd_jsonw_key(w, "deleted");
        rd_jsonw_bool(w, true);
        rd_jsonw_object_close(w);
    } else {
        rd_message_write_json(w, m, c->match.queue, c->match.queue_len, false);
    }
    rd_jsonw_object_close(w);
    if (st == RD_STORE_OK && m->status == RD_STATUS_PENDING && m->retry_after_ms < 0)
        b->ready = true;
}

static void on_chunk(size_t first, const rd_store_enqueued_many_t *res, void *arg)
{
    batch_t *b = arg;
    b->c->api->batch.calls++;
    for (size_t k = 0; k < res->count; k++) {
        size_t item = b->index[first + k];
        write_invalid_until(b, item);
        write_result(b, &res->items[k]);
        b->written = item + 1;
    }
}

/* The answer: every item not written yet (invalid, or not done), then 200. */
static void finish(batch_t *b, const rd_store_head_t *failure, size_t failed_from,
                   size_t failed_to)
{
    rd_call_t *c = b->c;
    rd_store_status_t failed = failure ? failure->status : RD_STORE_UNAVAILABLE;
    for (size_t s = failed_from; s < b->nsent; s++) {
        size_t item = b->index[s];
        write_invalid_until(b, item);
        bool in_call = s < failed_to;   /* the items after the failed call were never sent */
        if (in_call && failed == RD_STORE_LOST)
            write_problem(b, RD_PROBLEM_OUTCOME_UNKNOWN,
                          "The link to Redis dropped after this message was sent; it may or may "
                          "not have been enqueued. Sending it again with an idempotency_key is "
                          "safe.", NULL);
        else if (in_call && (failed == RD_STORE_RESHARD || failed == RD_STORE_COPY))
            write_problem(b, RD_PROBLEM_BACKEND_UNAVAILABLE, "The queue's shards changed while "
                          "this message was placed; it was not enqueued.", NULL);
        else if (in_call && failed == RD_STORE_ERROR)
            write_problem(b, RD_PROBLEM_INTERNAL, "Redis answered with an error; see the log.",
                          NULL);
        else
            write_problem(b, RD_PROBLEM_BACKEND_UNAVAILABLE,
                          "Redis is not reachable; this message was not enqueued.", NULL);
        b->written = item + 1;
    }
    write_invalid_until(b, b->req.count);
    rd_jsonw_array_close(&b->w);
    rd_jsonw_object_close(&b->w);
    if (b->ready && c->api->waiters)
        rd_waiters_notify(c->api->waiters, rd_api_queue_of(c));
    rd_api_respond_body(c, 200, b->out.data, b->out.len);
    batch_free(b);
}

static void on_done(size_t done, const rd_store_head_t *failure, size_t in_call, void *arg)
{
    batch_t *b = arg;
    if (failure && done == 0) {
        /* Nothing was enqueued: the request's own answer, as a single
         * enqueue's (503 backend-unavailable or outcome-unknown, 500). */
        rd_call_t *c = b->c;
        batch_free(b);
        rd_api_respond_store_failure(c, failure);
        return;
    }
    finish(b, failure, done, done + in_call);
}

void rd_api_enqueue_batch(rd_call_t *c, rd_enqueue_req_t *e)
{
    batch_t *b = rd_calloc(1, sizeof *b);
    b->c = c;
    rd_field_errors_t errs = { .count = 0 };
    if (rd_request_enqueue_batch(e, &b->req, &errs) != RD_REQ_OK) {
        batch_free(b);
        rd_api_answer_parse_failure(c, RD_REQ_INVALID, &errs);
        return;
    }
    c->api->batch.requests++;
    c->api->batch.items += b->req.count;
    size_t n = b->req.count;
    b->sent = rd_calloc(n, sizeof *b->sent);
    b->index = rd_calloc(n, sizeof *b->index);
    for (size_t i = 0; i < n; i++) {
        const rd_enqueue_req_t *it = &b->req.items[i];
        if (it->malformed || b->req.errs[i].count > 0) continue;
        b->index[b->nsent] = i;
        b->sent[b->nsent++] = (rd_enqueue_t){
            .payload = it->payload, .len = it->payload_len,
            .max_retries = it->max_retries_given ? it->max_retries : 0,
            .delay_ms = it->delay_ms, .ttl_ms = it->ttl_ms, .priority = it->priority,
            .group = it->group, .idempotency_key = it->idempotency_key };
    }
    rd_jsonw_init(&b->w, &b->out);
    rd_jsonw_object_open(&b->w);
    rd_jsonw_key(&b->w, "results");
    rd_jsonw_array_open(&b->w);
    if (b->nsent == 0) {   /* every item invalid: nothing to send */
        finish(b, NULL, 0, 0);
        return;
    }
    if (rd_enqueue_chunks(c->api->store, rd_api_queue_of(c), b->sent, b->nsent, on_chunk, on_done,
                          b) != 0) {
        batch_free(b);
        rd_api_started(c, -1);
    }
}

void rd_api_batch_render_metrics(const rd_api_t *api, rd_buf_t *out)
{
    rd_buf_printf(out,
                  "# HELP retryd_enqueue_batch_requests_total Batch enqueues (POST "
                  "/queues/{q}/messages with messages) this instance accepted.\n"
                  "# TYPE retryd_enqueue_batch_requests_total counter\n"
                  "retryd_enqueue_batch_requests_total %llu\n"
                  "# HELP retryd_enqueue_batch_items_total Items of those batches, valid or not.\n"
                  "# TYPE retryd_enqueue_batch_items_total counter\n"
                  "retryd_enqueue_batch_items_total %llu\n"
                  "# HELP retryd_enqueue_batch_calls_total enqueue_many function calls they took "
                  "(at most 100 items each).\n"
                  "# TYPE retryd_enqueue_batch_calls_total counter\n"
                  "retryd_enqueue_batch_calls_total %llu\n",
                  api->batch.requests, api->batch.items, api->batch.calls);
}
