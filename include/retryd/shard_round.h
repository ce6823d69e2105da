/* shard_round.h - what a sharded queue's round does after its ticks
 * (docs/sharding.md "When the raise settles"): the walks of a raise's old
 * shards, and closing the raise once no group is left on a shard it no
 * longer belongs to. The timer's round runs it for every sharded queue
 * whose raise is settling (a settling queue's shard 0 comes due every
 * second), and a raise runs it once at its end. */
#ifndef RETRYD_SHARD_ROUND_H
#define RETRYD_SHARD_ROUND_H

#include "retryd/store.h"

typedef enum rd_shard_round_status {
    RD_SHARD_ROUND_IDLE,       /* no raise settles (or no view): nothing done */
    RD_SHARD_ROUND_SETTLING,   /* walked as far as a round goes, or strays are left */
    RD_SHARD_ROUND_CLOSED,     /* the raise is closed and copied */
    RD_SHARD_ROUND_STALE,      /* the layout changed meanwhile: the view is read again */
    RD_SHARD_ROUND_FAILED,     /* a call failed: the next round goes on */
} rd_shard_round_status_t;

/* strays: the stray groups the walked shards reported. */
typedef void (*rd_shard_round_cb)(rd_shard_round_status_t status, long long strays, void *arg);

/* One round for q: its layout read from shard 0 first, then the walks and,
 * when every old shard has walked its groups and none has strays, the
 * close. A round that is not done registers q due again within a second.
 * cb (NULL: none) runs exactly once, from the loop; -1 when the first call
 * could not be sent (cb never runs). */
int rd_shard_round(rd_store_t *st, rd_store_queue_t q, rd_shard_round_cb cb, void *arg);

#endif
