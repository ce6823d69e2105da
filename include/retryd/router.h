/* router.h - route tables: (method, raw path) -> the matching row of a table
 * and its parameters. The table itself is the API's (api.c, rd_api_routes).
 * Pure: no I/O, no allocation beyond the decoded queue name. */
#ifndef RETRYD_ROUTER_H
#define RETRYD_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/http.h"

/* What a route runs. The request state (struct rd_call) belongs to the layer
 * that registers the table (api.c); the router never looks inside it, it only
 * hands back the row that matched. */
typedef struct rd_call rd_call_t;
typedef void (*rd_route_handler_fn)(rd_call_t *call);

enum rd_route_flags {
    RD_ROUTE_PUBLIC = 1u << 0,  /* answered without the bearer token */
    RD_ROUTE_PREFIX = 1u << 1,  /* matches the pattern and every path under "<pattern>/" */
};

/* One row of a route table: {method, pattern, handler, flags, role}. In a
 * pattern, a "{q}" segment captures the queue (percent-decoded) and "{id}" a
 * message id (a positive integer). HEAD matches the GET rows. */
typedef struct rd_route {
    rd_http_method_t method;
    const char *pattern;
    rd_route_handler_fn handler;
    unsigned flags;             /* rd_route_flags */
    unsigned role;              /* the role a token needs here (tokens.h rd_role_t,
                                 * RD_ROLE_ANY: any known token); public rows need none */
} rd_route_t;

typedef enum rd_route_outcome {
    RD_ROUTE_MATCHED,
    RD_ROUTE_NO_PATH,           /* 404 */
    RD_ROUTE_NO_METHOD,         /* 405: allow holds the methods the path takes */
    RD_ROUTE_BAD_ID,            /* the {id} segment is not a positive integer: 404 */
} rd_route_outcome_t;

typedef struct rd_route_match {
    const rd_route_t *route;    /* RD_ROUTE_MATCHED: the row */
    char *queue;            /* percent-decoded {q}; owned, free with rd_route_match_free */
    size_t queue_len;
    bool queue_decoded;     /* false when {q} had a broken %-escape (a 422) */
    long long id;           /* {id} when the route has one */
    char allow[64];         /* for RD_ROUTE_NO_METHOD, e.g. "GET, POST" */
} rd_route_match_t;

/* Matches (method, path[0..len)) against routes[0..n), first row first. */
rd_route_outcome_t rd_router_match(const rd_route_t *routes, size_t n, rd_http_method_t method,
                                   const char *path, size_t len, rd_route_match_t *m);
void rd_route_match_free(rd_route_match_t *m);

/* Percent-decodes s[0..len) into out (at least len + 1 bytes). '+' is kept
 * unless plus_is_space. Returns the decoded length, or -1 on a broken escape. */
long rd_percent_decode(const char *s, size_t len, char *out, bool plus_is_space);

#endif
