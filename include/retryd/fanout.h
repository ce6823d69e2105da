/* fanout.h - every queue at once (GET /queues, GET /metrics): a page of the
 * registry, then each of its queues' stats, with a bound on the stats calls
 * in flight for all fan-outs together, and the /metrics snapshot that
 * concurrent scrapes share. Above the store: every call is a store
 * operation (queues_page, stats). Same async rule as store.h. */
#ifndef RETRYD_FANOUT_H
#define RETRYD_FANOUT_H

#include <uv.h>

#include "retryd/metrics.h"
#include "retryd/registry.h"
#include "retryd/store.h"

typedef struct rd_fanout rd_fanout_t;

/* A page of the registry with each queue's numbers. */
typedef struct rd_fanout_queues {
    rd_store_head_t head;     /* the page's read; RD_STORE_UNAVAILABLE also when a queue's
                                 stats could not be read and Redis is not ready */
    rd_queue_metrics_t *queues; /* count of them, in name order; ok false for a queue whose
                                   stats could not be read */
    size_t count;
    long long total;          /* how many queues are registered */
    rd_str_t next_cursor;     /* len 0 at the end */
    long long age_ms;         /* rd_fanout_snapshot: how old the numbers are; else 0 */
} rd_fanout_queues_t;
typedef void (*rd_fanout_cb)(const rd_fanout_queues_t *res, void *arg);
enum { RD_FANOUT_IN_FLIGHT = 16 };

/* Borrows st and registry until rd_fanout_free. */
rd_fanout_t *rd_fanout_new(uv_loop_t *loop, rd_store_t *st, rd_registry_t *registry);
/* Only once the store's link has closed (every fan-out answered). */
void rd_fanout_free(rd_fanout_t *fo);

/* rd_store_queues_page, then each of its queues' stats; at most
 * RD_FANOUT_IN_FLIGHT stats calls are in flight for all fan-outs of fo
 * together (each fan-out sends one in turn); the callback runs once the last
 * returned. A queue whose stats show none of its keys is handed to the timer
 * at once (rd_registry_schedule with 0), which removes it from the registry
 * (docs/design.md "Leaving the registry"). */
int rd_fanout_queues_stats(rd_fanout_t *fo, const char *cursor, size_t cursor_len, int limit,
                           rd_fanout_cb cb, void *arg);

/* The first RD_METRICS_MAX_QUEUES queues' numbers (GET /metrics) from one
 * snapshot that fo shares among its callers: answered from it while it is at
 * most max_age_ms old (res->age_ms says how old), else after one new
 * fan-out (rd_fanout_queues_stats) that every caller arriving meanwhile waits
 * for, so concurrent scrapes cause one fan-out, not one each. Returns -1
 * (cb never called) when that fan-out cannot start; else cb runs exactly
 * once, from the loop; res is valid only inside cb. A failed refresh answers
 * its waiters with the failure and keeps the old snapshot. */
int rd_fanout_snapshot(rd_fanout_t *fo, long long max_age_ms, rd_fanout_cb cb, void *arg);

#endif
