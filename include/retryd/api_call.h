/* api_call.h - what the API's handler files share (src/api.c, the routes'
 * table and most handlers; src/api_policy.c; src/api_groups.c): the state
 * of one request and the helpers that answer it. Internal to the API: only
 * those files include it.
 *
 * Every helper that answers frees the call: the caller must not touch it
 * after. A handler that starts a store operation hands its return code to
 * rd_api_started, which answers 503 when the operation could not start (its
 * callback never runs). */
#ifndef RETRYD_API_CALL_H
#define RETRYD_API_CALL_H

#include <stdbool.h>

#include "retryd/api.h"
#include "retryd/json.h"
#include "retryd/jsonw.h"
#include "retryd/policy.h"
#include "retryd/problem.h"
#include "retryd/request.h"
#include "retryd/router.h"
#include "retryd/store.h"

/* One request waiting for the store; freed after its response. */
struct rd_call {
    rd_api_t *api;
    rd_http_exchange_t *ex;
    const rd_http_request_t *req;
    rd_route_match_t match;
    rd_tokens_t *tokens;        /* a reference to the set token is in; NULL: no auth */
    const rd_token_t *token;    /* the request's token; NULL: no auth (may do anything) */
    /* a transition of one message, for its invalid-state answer: "succeed"
     * needs "a processing" message ... (set by its handler) */
    const char *verb, *needs;
    bool notify;                /* a message may have become claimable: wake long-polls */
    bool metrics;               /* the fan-out answers /metrics, not GET /queues */
    bool batch;                 /* claim with count: answer {messages:[...]} */
    /* claim with settle (docs/reference.md "Settle and claim"): the ids in request order, their outcomes
     * once applied, and the claim to park when nothing was claimable. */
    long long *settle_ids;
    char (*settled)[16];
    size_t nsettle;
    rd_lease_t lease;
    long long wait_ms;
    int count;
    char *worker;               /* claim with settle: the claim's worker, or NULL */
    rd_ack_req_t *ack;          /* batch acknowledgement: the ids, in order */
    rd_replay_req_t replay;     /* batch replay: what to replay */
    int top;                    /* GET stats: how many top errors */
    rd_json_t *series;          /* GET stats?series=: the stats document, waiting for its
                                   series (read after the stats, which teach the view) */
    const char *series_of;      /* GET stats?series=: "minute" or "hour" (static) */
    rd_policy_t *policy;        /* PUT policy: kept while dlq_link checks the target */
    bool paused;                /* pause, resume: the answer, kept while the copies run */
};

/* The answers (src/api_respond.c). */

/* Frees an answered call (every helper below calls it). */
void rd_api_call_free(rd_call_t *c);
/* 503: Redis is not reachable, nothing was done. */
void rd_api_respond_unavailable(rd_call_t *c);
/* 200/201/... with doc (freed) as its JSON body. */
void rd_api_respond_json(rd_call_t *c, int status, rd_json_t *doc, const char *extra_headers);
/* The writer of an answer, on the api's reused body buffer: write one value,
 * then call rd_api_respond_written at once. */
void rd_api_begin_json(rd_call_t *c, rd_jsonw_t *w);
void rd_api_respond_written(rd_call_t *c, int status, const char *extra_headers);
/* status with body[0..len) (JSON, written by the caller in a buffer of its
 * own: an answer built across callbacks cannot use the shared one). */
void rd_api_respond_body(rd_call_t *c, int status, const char *body, size_t len);
void rd_api_respond_problem(rd_call_t *c, rd_problem_t p, const char *detail,
                            const rd_field_errors_t *errs, const char *extra_headers);
/* Answers a store outcome other than OK (and DUPLICATE) with its problem;
 * true when it answered. */
bool rd_api_respond_store_failure(rd_call_t *c, const rd_store_head_t *res);
/* rc != 0 (the operation could not start): 503, nothing was done. */
void rd_api_started(rd_call_t *c, int rc);
/* 400 for RD_REQ_MALFORMED, else 422 with errs. */
void rd_api_answer_parse_failure(rd_call_t *c, rd_req_result_t r, const rd_field_errors_t *errs);
/* The route's queue, as the store takes it. */
rd_store_queue_t rd_api_queue_of(const rd_call_t *c);

/* src/api_auth.c (docs/security.md "Tokens"). Before routing answers:
 * 401 unless the request carries a known token or the route is public;
 * sets c->token. Returns false when it answered. */
bool rd_api_authenticate(rd_call_t *c, bool public_route);
/* After the queue name was checked: 403 unless the token has the route's
 * role and its patterns cover the route's queue. Returns false when it
 * answered. */
bool rd_api_authorize(rd_call_t *c);
/* 403 unless the token's patterns cover queue name[0..len) too: the target
 * of a redrive (field "to") or of a policy's "dead_letter_queue". Returns
 * false when it answered. */
bool rd_api_authorize_queue(rd_call_t *c, const char *name, size_t len, const char *field);
/* True when the token sees queue name[0..len) (in listings and /metrics). */
bool rd_api_sees_queue(const rd_call_t *c, const char *name, size_t len);
/* True when the token is limited to queue patterns: totals over every queue
 * are left out of its listings and /metrics. */
bool rd_api_limited(const rd_call_t *c);
/* rd_api_check_head's token checks on a request's head; m: the matched
 * route, NULL when none matched. False (refusal filled) to refuse unread. */
bool rd_api_head_allowed(const rd_api_t *api, const rd_http_request_t *head,
                         const rd_route_match_t *m, rd_http_refusal_t *refusal);
/* GET /auth/whoami: the token's roles and queue patterns (never the token). */
void rd_api_handle_whoami(rd_call_t *c);

/* The handlers of src/api_policy.c (docs/reference.md "Queue policy and flow
 * control"). */
void rd_api_handle_policy_get(rd_call_t *c);
void rd_api_handle_policy_put(rd_call_t *c);
void rd_api_handle_policy_patch(rd_call_t *c);
void rd_api_handle_pause(rd_call_t *c);
void rd_api_handle_resume(rd_call_t *c);

/* GET /queues/{q}/groups (src/api_groups.c, docs/reference.md "Fairness
 * groups"). */
void rd_api_handle_groups(rd_call_t *c);

/* POST /queues/{q}/messages with {"messages": [...]} (src/api_batch.c,
 * docs/reference.md "Batch enqueue"): e is rd_request_enqueue's
 * RD_REQ_BATCH, whose documents it takes over. Answers c. */
void rd_api_enqueue_batch(rd_call_t *c, rd_enqueue_req_t *e);
/* The batch enqueue's /metrics families. */
void rd_api_batch_render_metrics(const rd_api_t *api, rd_buf_t *out);

#endif
