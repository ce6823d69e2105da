/* backend.h - what the store talks to: one Redis (redis.h) or a Redis
 * Cluster (cluster.h), behind the same four calls so that nothing above
 * knows which. Same async rule as redis.h. */
#ifndef RETRYD_BACKEND_H
#define RETRYD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "retryd/metrics.h"
#include "retryd/redis.h"

typedef struct rd_backend rd_backend_t;

/* cluster_seeds NULL or "": one Redis at opts->host:port; otherwise a cluster
 * found through the seeds. Returns NULL when the seeds cannot be parsed. */
rd_backend_t *rd_backend_start(uv_loop_t *loop, const rd_redis_options_t *opts,
                               const char *cluster_seeds);
bool rd_backend_ready(const rd_backend_t *b);
/* True once every link has had its first connect attempt (in a cluster, the
 * link of every master in the slot map; docs/cluster.md "Readiness"). */
bool rd_backend_started(const rd_backend_t *b);
int rd_backend_command(rd_backend_t *b, int argc, const char **argv, const size_t *lens,
                       rd_redis_cb cb, void *arg);
const rd_histogram_t *rd_backend_rtt(rd_backend_t *b);
/* Where the notification link should connect. */
void rd_backend_notify_address(const rd_backend_t *b, char *host, size_t host_len, int *port);
void rd_backend_close(rd_backend_t *b, bool force, void (*on_closed)(void *arg), void *arg);

#endif
