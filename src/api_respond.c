/* api_respond.c - answering one API request: the JSON and problem answers,
 * the store outcomes' problems, and freeing the call once answered
 * (include/retryd/api_call.h). Every handler file answers through these. */
#include "retryd/api_call.h"

#include <stdio.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/log.h"
#include "retryd/tokens.h"

typedef rd_call_t call_t;

void rd_api_call_free(call_t *c)
{
    if (c->ack) {
        rd_request_free(c->ack->doc);
        rd_free(c->ack);
    }
    rd_request_replay_free(&c->replay);
    rd_free(c->settle_ids);
    rd_free(c->settled);
    rd_free(c->worker);
    rd_json_free(c->series);
    if (c->policy) {
        rd_policy_free(c->policy);
        rd_free(c->policy);
    }
    rd_route_match_free(&c->match);
    rd_tokens_unref(c->tokens);
    rd_free(c);
}

void rd_api_respond_json(call_t *c, int status, rd_json_t *doc, const char *extra_headers)
{
    size_t len;
    char *body = rd_json_print(doc, &len);
    rd_json_free(doc);
    rd_http_respond(c->ex, status, "application/json", extra_headers, body, len);
    rd_free(body);
    rd_api_call_free(c);
}

/* The writer of an answer, on api->body emptied; the caller writes one value
 * and calls respond_written at once (answering may run the next pipelined
 * request's handler, which reuses the buffer). A buffer a large page grew
 * past RD_API_BODY_KEEP_BYTES is given back rather than kept. */
#define RD_API_BODY_KEEP_BYTES (64 * 1024)

void rd_api_begin_json(call_t *c, rd_jsonw_t *w)
{
    rd_buf_t *b = &c->api->body;
    if (b->cap > RD_API_BODY_KEEP_BYTES) rd_buf_free(b);
    rd_buf_reset(b);
    rd_jsonw_init(w, b);
}

void rd_api_respond_written(call_t *c, int status, const char *extra_headers)
{
    const rd_buf_t *b = &c->api->body;
    rd_http_respond(c->ex, status, "application/json", extra_headers, b->data, b->len);
    rd_api_call_free(c);
}

void rd_api_respond_body(call_t *c, int status, const char *body, size_t len)
{
    rd_http_respond(c->ex, status, "application/json", NULL, body, len);
    rd_api_call_free(c);
}

void rd_api_respond_problem(call_t *c, rd_problem_t p, const char *detail,
                            const rd_field_errors_t *errs, const char *extra_headers)
{
    rd_http_respond_problem(c->ex, p, detail, errs, extra_headers);
    rd_api_call_free(c);
}

void rd_api_respond_unavailable(call_t *c)
{
    rd_api_respond_problem(c, RD_PROBLEM_BACKEND_UNAVAILABLE,
                           "Redis is not reachable; nothing was done.",
                    NULL, "Retry-After: 1\r\n");
}

/* Maps a store outcome other than OK to its problem; returns true when it
 * answered. */
bool rd_api_respond_store_failure(call_t *c, const rd_store_head_t *res)
{
    char detail[256];
    switch (res->status) {
    case RD_STORE_OK:
    case RD_STORE_DUPLICATE:
        return false;
    case RD_STORE_NOT_FOUND:
        snprintf(detail, sizeof detail, "message %lld does not exist in this queue.", c->match.id);
        rd_api_respond_problem(c, RD_PROBLEM_NOT_FOUND, detail, NULL, NULL);
        return true;
    case RD_STORE_INVALID_STATE:
        snprintf(detail, sizeof detail, "message %lld is %.*s; %s needs %s message.",
                 c->match.id, (int)res->state.len, res->state.ptr, c->verb ? c->verb : "this",
                 c->needs ? c->needs : "another");
        rd_api_respond_problem(c, RD_PROBLEM_INVALID_STATE, detail, NULL, NULL);
        return true;
    case RD_STORE_LEASE_MISMATCH:
        snprintf(detail, sizeof detail,
                 "lease_token is not the current lease of message %lld (the lease expired and "
                 "the message was claimed again, or the token is wrong).", c->match.id);
        rd_api_respond_problem(c, RD_PROBLEM_LEASE_MISMATCH, detail, NULL, NULL);
        return true;
    case RD_STORE_BAD_CURSOR: {
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "cursor", "invalid", "cursor must be a next_cursor value.");
        rd_api_respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The query has invalid fields.",
                               &errs,
                        NULL);
        return true;
    }
    case RD_STORE_UNAVAILABLE:
        rd_api_respond_unavailable(c);
        return true;
    case RD_STORE_RESHARD:   /* the enqueue paths place again once each; a second refusal */
    case RD_STORE_COPY:
    case RD_STORE_MOVED:
    case RD_STORE_FULL:
        rd_api_respond_problem(c, RD_PROBLEM_BACKEND_UNAVAILABLE,
                               "The queue's shards changed while the message was placed, or its "
                               "shard is full; nothing was done. Retry the request.",
                               NULL, "Retry-After: 1\r\n");
        return true;
    case RD_STORE_LOST:
        rd_api_respond_problem(c, RD_PROBLEM_OUTCOME_UNKNOWN,
                        "The link to Redis dropped after the command was sent; it may or may "
                        "not have been applied. Read the message before retrying.",
                        NULL, "Retry-After: 1\r\n");
        return true;
    case RD_STORE_TOO_LARGE:   /* only enqueue's, which answers it itself (on_enqueued) */
    case RD_STORE_ERROR:
        rd_error("api: Redis error on %.*s: %.*s", (int)c->req->path_len, c->req->path,
                 (int)res->detail.len, res->detail.ptr);
        rd_api_respond_problem(c, RD_PROBLEM_INTERNAL, "Redis answered with an error; see the log.",
                        NULL, NULL);
        return true;
    }
    return false;
}

/* The one path of a store operation that could not start (Redis not ready:
 * its callback never runs): 503, nothing was done. */
void rd_api_started(call_t *c, int rc)
{
    if (rc != 0) rd_api_respond_unavailable(c);
}

void rd_api_answer_parse_failure(call_t *c, rd_req_result_t r, const rd_field_errors_t *errs)
{
    if (r == RD_REQ_MALFORMED)
        rd_api_respond_problem(c, RD_PROBLEM_MALFORMED_REQUEST,
                        "The body must be a JSON object.", NULL, NULL);
    else
        rd_api_respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The request has invalid fields.",
                               errs,
                        NULL);
}

rd_store_queue_t rd_api_queue_of(const call_t *c)
{
    return (rd_store_queue_t){ .name = c->match.queue, .len = c->match.queue_len };
}
