/* api.h - the HTTP API: its route table, and the handler that routes each
 * request to its row's handler (validate, call the store, answer). */
#ifndef RETRYD_API_H
#define RETRYD_API_H

#include "retryd/alerts.h"
#include "retryd/buf.h"
#include "retryd/coalesce.h"
#include "retryd/enqueue_lines.h"
#include "retryd/config.h"
#include "retryd/http.h"
#include "retryd/router.h"
#include "retryd/fanout.h"
#include "retryd/store.h"
#include "retryd/tokens.h"
#include "retryd/waiters.h"

typedef struct rd_api {
    rd_store_t *store;          /* borrowed; NULL once the server has closed it */
    rd_fanout_t *fanout;        /* borrowed: GET /queues and /metrics; NULL with store */
    rd_coalescer_t *coalescer;  /* borrowed: settle-and-claim goes through it; NULL with store */
    rd_enqueue_lines_t *enqueues; /* borrowed: single enqueues go through it; NULL: straight
                                     to the store */
    rd_waiters_t *waiters;      /* borrowed: long-poll claims */
    rd_alerts_t *alerts;        /* borrowed: the alert sender, NULL until one is started */
    rd_http_server_t *http;     /* borrowed: the server, for /metrics; NULL before it starts */
    struct rd_sqs *sqs;         /* borrowed: the SQS endpoint, for /metrics; NULL without it */
    const rd_config_t *cfg;     /* borrowed */
    rd_tokens_t *tokens;        /* one reference: the tokens of --token-file and
                                 * --auth-token-file; NULL leaves the API open. Replaced
                                 * on SIGHUP (rd_api_set_tokens) */
    rd_buf_t body;              /* owned: the JSON answer being written, reused by
                                 * every answer (start RD_BUF_INIT, rd_buf_free it) */
    /* Batch enqueues (src/api_batch.c), for /metrics: requests, their items,
     * and the enqueue_many calls they took. */
    struct { unsigned long long requests, items, calls; } batch;
} rd_api_t;

/* Every route of the API (README.md "HTTP API"): {method, pattern, handler,
 * flags, role}; docs/security.md "Tokens" lists the roles. */
extern const rd_route_t rd_api_routes[];
extern const size_t rd_api_route_count;

/* docs/openapi.json, the OpenAPI 3.1 document of this API, compiled into the
 * binary by scripts/embed.sh (NUL-terminated) and served at GET /openapi.json. */
extern const char rd_openapi_json[];

/* The rd_http_head_fn of the server (src/api.c; its token checks are
 * src/api_auth.c's); ctx is a rd_api_t.
 * Refuses a request with a body, so that the body is never read: with 401
 * when it lacks a known bearer token, on any route (the public ones take no
 * body), and with 403 when the token lacks the role of the route the path
 * names or the queue is outside its patterns; everything else goes on. */
bool rd_api_check_head(const rd_http_request_t *head, void *ctx, rd_http_refusal_t *refusal);

/* Takes over a reference to tokens (a new set, SIGHUP) and drops the API's
 * reference to the old one: requests in flight keep theirs until they answer. */
void rd_api_set_tokens(rd_api_t *api, rd_tokens_t *tokens);

/* The rd_http_handler_fn of the server; ctx is a rd_api_t. */
void rd_api_handle(rd_http_exchange_t *ex, const rd_http_request_t *req, void *ctx);

#endif
