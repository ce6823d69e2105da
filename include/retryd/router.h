/* router.h - the route table: (method, raw path) -> route and its parameters.
 * Pure: no I/O, no allocation beyond the decoded queue name. */
#ifndef RETRYD_ROUTER_H
#define RETRYD_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/http.h"

typedef enum rd_route {
    RD_ROUTE_HEALTHZ,
    RD_ROUTE_READYZ,
    RD_ROUTE_ENQUEUE,        /* POST /queues/{q}/messages */
    RD_ROUTE_LIST,           /* GET  /queues/{q}/messages */
    RD_ROUTE_GET,            /* GET  /queues/{q}/messages/{id} */
    RD_ROUTE_CLAIM,          /* POST /queues/{q}/claim */
    RD_ROUTE_SUCCEED,        /* POST /queues/{q}/messages/{id}/succeed */
    RD_ROUTE_FAIL,           /* POST /queues/{q}/messages/{id}/fail */
    RD_ROUTE_REPLAY,         /* POST /queues/{q}/messages/{id}/replay */
    RD_ROUTE_EXTEND,         /* POST /queues/{q}/messages/{id}/extend */
    RD_ROUTE_SUCCEED_MANY,   /* POST /queues/{q}/succeed (batch acknowledgement) */
    RD_ROUTE_KILL,           /* POST /queues/{q}/messages/{id}/kill */
    RD_ROUTE_DELETE,         /* DELETE /queues/{q}/messages/{id} */
    RD_ROUTE_REPLAY_MANY,    /* POST /queues/{q}/replay (batch replay of dead letters) */
    RD_ROUTE_QUEUES,         /* GET  /queues */
    RD_ROUTE_STATS,          /* GET  /queues/{q}/stats */
    RD_ROUTE_METRICS,        /* GET  /metrics */
    RD_ROUTE_UI,             /* GET  /ui and everything under /ui/ (the web console) */
    RD_ROUTE_COUNT
} rd_route_t;

typedef enum rd_route_outcome {
    RD_ROUTE_MATCHED,
    RD_ROUTE_NO_PATH,           /* 404 */
    RD_ROUTE_NO_METHOD,         /* 405: allow holds the methods the path takes */
    RD_ROUTE_BAD_ID,            /* the {id} segment is not a positive integer: 404 */
} rd_route_outcome_t;

typedef struct rd_route_match {
    rd_route_t route;
    char *queue;            /* percent-decoded {q}; owned, free with rd_route_match_free */
    size_t queue_len;
    bool queue_decoded;     /* false when {q} had a broken %-escape (a 422) */
    long long id;           /* {id} when the route has one */
    char allow[64];         /* for RD_ROUTE_NO_METHOD, e.g. "GET, POST" */
} rd_route_match_t;

rd_route_outcome_t rd_router_match(rd_http_method_t method, const char *path, size_t len,
                                   rd_route_match_t *m);
void rd_route_match_free(rd_route_match_t *m);

/* Percent-decodes s[0..len) into out (at least len + 1 bytes). '+' is kept
 * unless plus_is_space. Returns the decoded length, or -1 on a broken escape. */
long rd_percent_decode(const char *s, size_t len, char *out, bool plus_is_space);

#endif
