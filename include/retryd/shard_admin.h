/* shard_admin.h - changing how many shards a queue spreads over, and keeping
 * every shard's copy of its policy (docs/sharding.md "Changing shards on a
 * live queue", "Every API over all shards"). Every step is one function call
 * on one shard, through the store; nothing moves between shards. */
#ifndef RETRYD_SHARD_ADMIN_H
#define RETRYD_SHARD_ADMIN_H

#include "retryd/store.h"

typedef enum rd_shard_admin_status {
    RD_SHARD_ADMIN_OK,
    RD_SHARD_ADMIN_SETTLING,        /* a change has not settled, or one runs: try later */
    RD_SHARD_ADMIN_UPGRADE_PENDING, /* an older retryd library is loaded */
    RD_SHARD_ADMIN_NOT_EMPTY,       /* a lowering found a message: nothing changed */
    RD_SHARD_ADMIN_LIMITED,         /* the policy has max_in_flight or rate_limit, which
                                       are not held across shards yet: nothing changed */
    RD_SHARD_ADMIN_STORE,           /* a call failed: head says how */
} rd_shard_admin_status_t;

typedef struct rd_shard_admin_result {
    rd_shard_admin_status_t status;
    rd_store_head_t head;       /* STORE: the failed call's outcome */
    const char *detail;         /* SETTLING, UPGRADE_PENDING, NOT_EMPTY: one sentence */
    int shards;                 /* OK: the queue's count now */
} rd_shard_admin_result_t;

typedef void (*rd_shard_admin_cb)(const rd_shard_admin_result_t *res, void *arg);

/* Sets q's shards to `to` (1..RD_SHARDS_MAX). A raise writes the count and
 * the layout on shard 0, then copies policy and layout to every shard; a
 * lowering fences the shards it drops and checks every shard for messages
 * (any state), and is undone (NOT_EMPTY) when one holds any. Refused while
 * an older library is loaded or a change has not settled. The same count is
 * OK at once. -1 when the first call could not be sent (cb never runs);
 * else cb runs exactly once, from the loop. */
int rd_shard_admin_change(rd_store_t *st, rd_store_queue_t q, int to, rd_shard_admin_cb cb,
                          void *arg);

/* Copies shard 0's policy and layout to shards 1..N-1 of q (nothing on a
 * queue of one shard): after every write of a sharded queue's policy, pause
 * or resume, before its answer. A shard that holds a newer copy keeps it.
 * As rd_shard_admin_change for -1 and cb. */
int rd_shard_admin_copy(rd_store_t *st, rd_store_queue_t q, rd_shard_admin_cb cb, void *arg);

#endif
