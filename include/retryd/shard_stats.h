/* shard_stats.h - a queue's stats over all its shards (docs/sharding.md
 * "Every API over all shards"): the stats of each shard in turn, summed.
 * Every face that answers a queue's counts (GET stats, GET /queues,
 * /metrics, SQS's GetQueueAttributes) asks through it. */
#ifndef RETRYD_SHARD_STATS_H
#define RETRYD_SHARD_STATS_H

#include "retryd/store.h"

/* rd_store_stats of q, over every shard when q is sharded: gauges and
 * totals summed (paused, sqs and shards from shard 0), top errors merged by
 * text, the top `top` kept. A queue this daemon has no view of is asked on
 * shard 0; when its answer says it has more shards, the view is read and
 * every shard asked. As rd_store_stats for -1 and cb. */
int rd_shard_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg);
/* rd_store_series of q, each bucket summed over every shard of this
 * daemon's view (docs/series.md, docs/sharding.md): GET stats asks it after
 * rd_shard_stats, which learns the view of a sharded queue it had none of.
 * As rd_store_series for -1 and cb. */
int rd_shard_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg);

#endif
