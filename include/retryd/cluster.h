/* cluster.h - Redis Cluster routing (docs/cluster.md): a slot map from
 * CLUSTER SLOTS, one command link per master (each loads the Functions
 * library), each call sent to the master that owns its first key's slot,
 * MOVED/ASK/TRYAGAIN followed. Same async rule as redis.h. */
#ifndef RETRYD_CLUSTER_H
#define RETRYD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "retryd/metrics.h"
#include "retryd/redis.h"

typedef struct rd_cluster rd_cluster_t;

/* The slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key
 * when it has no non-empty {tag}, modulo 16384 (as CLUSTER KEYSLOT). */
unsigned rd_cluster_slot(const char *key, size_t len);

/* The slot a command's first key routes to, or -1 for a keyless command
 * (any master will do). */
int rd_cluster_command_slot(int argc, const char **argv, const size_t *lens);

/* seeds: "host:port[,host:port...]". opts gives credentials, timeouts, the
 * library and on_ready (called when any master link becomes ready); host and
 * port in opts are ignored. Returns NULL when seeds cannot be parsed. */
rd_cluster_t *rd_cluster_start(uv_loop_t *loop, const char *seeds, const rd_redis_options_t *opts);

/* True once a slot map is known and some master link is READY: calls can be
 * sent (those for a master still connecting wait for it). */
bool rd_cluster_ready(const rd_cluster_t *c);
/* True once a slot map is known and every master in it has had its first
 * connect attempt (ended READY or failed): what /readyz waits for. */
bool rd_cluster_started(const rd_cluster_t *c);

/* As rd_redis_command, routed; cb may also get RD_REDIS_NOT_SENT when no
 * master could take the call after redirects and retries. A call for a master
 * whose link is connecting is accepted and waits for it, at most the link's
 * timeout_ms; -1 (cb never called) when the map is unknown or the master's
 * link is down between attempts. */
int rd_cluster_command(rd_cluster_t *c, int argc, const char **argv, const size_t *lens,
                       rd_redis_cb cb, void *arg);

/* Round-trip times summed over every master link. */
const rd_histogram_t *rd_cluster_rtt(rd_cluster_t *c);

/* Host and port of some node believed alive (for the notification link). */
void rd_cluster_any_node(const rd_cluster_t *c, char *host, size_t host_len, int *port);

void rd_cluster_close(rd_cluster_t *c, bool force, void (*on_closed)(void *arg), void *arg);

#endif
