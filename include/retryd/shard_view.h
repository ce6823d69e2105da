/* shard_view.h - what this daemon knows of each sharded queue's layout
 * (docs/sharding.md "Where shards is read"), and where a message goes
 * (section 2, "Enqueue: which shard"). A queue without a view is one shard
 * (every queue of today). A view is learned from shard 0's policy_get, when
 * a placement was refused ({"reshard"}) or an empty claim or a tick said
 * the queue is sharded, read again RD_SHARD_VIEW_REFRESH_MS after it was
 * learned while in use, and dropped after RD_SHARD_VIEW_IDLE_MS unused. */
#ifndef RETRYD_SHARD_VIEW_H
#define RETRYD_SHARD_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "retryd/shards.h"
#include "retryd/store.h"

enum {
    RD_SHARD_VIEW_IDLE_MS = 300000,   /* a view unused this long is dropped */
    RD_SHARD_VIEW_REFRESH_MS = 2000,  /* a view used this long after it was learned is read
                                         again (rd_store_view), so that a daemon that only
                                         claims or ticks a queue sees its changes too */
    RD_SHARD_VIEW_KEYS_MAX = 3,
    RD_SHARD_ATTEMPTS_MAX = 5,
};

typedef struct rd_shard_view {
    int n;                          /* shards now, 2..RD_SHARDS_MAX */
    long long rev;                  /* the layout's rev */
    int from;                       /* the count before a raise not settled yet; 0: none */
    int lowering;                   /* M while a lowering to M runs; 0: none */
    int hw;                         /* the most shards the queue ever had (>= n) */
    uint16_t salts[RD_SHARDS_MAX - 1];
    int nsalts;
    struct { int n; long long until_ms; } keys[RD_SHARD_VIEW_KEYS_MAX];
    int nkeys;                      /* older counts whose idempotency keys may be live */
    unsigned next;                  /* round robin of ungrouped, unkeyed messages */
} rd_shard_view_t;

typedef struct rd_shard_views rd_shard_views_t;

rd_shard_views_t *rd_shard_views_new(void);
void rd_shard_views_free(rd_shard_views_t *vs);

/* q's view, or NULL (one shard): a view unused for RD_SHARD_VIEW_IDLE_MS by
 * now_ms is dropped here. */
rd_shard_view_t *rd_shard_views_find(rd_shard_views_t *vs, rd_store_queue_t q, uint64_t now_ms);
/* True once for a view learned RD_SHARD_VIEW_REFRESH_MS ago: the caller
 * reads it again (rd_store_view does); false again until it is learned. */
bool rd_shard_views_refresh_due(rd_shard_views_t *vs, rd_store_queue_t q, uint64_t now_ms);
/* A refresh that failed: due again at the next use. */
void rd_shard_views_refresh_failed(rd_shard_views_t *vs, rd_store_queue_t q);
/* From shard 0's policy_get pairs (or policy_set's): sets q's view, or drops
 * it when the queue is one shard. */
void rd_shard_views_learn(rd_shard_views_t *vs, rd_store_queue_t q, const rd_str_t *pairs,
                          size_t n, uint64_t now_ms);

/* Shard 0's policy_get pairs as a layout, whatever its count: out->n 1 for
 * a queue of one shard (out->hw says whether it had more, out->salts their
 * salts). True when the queue is sharded now (a view is kept for it). */
bool rd_shard_layout_read(const rd_str_t *pairs, size_t n, rd_shard_view_t *out);

/* q at shard `shard` as the view places it: its salts and the view's rev
 * (v NULL: shard 0 of a queue of one shard, no rev). */
rd_store_queue_t rd_shard_view_at(const rd_shard_view_t *v, rd_store_queue_t q, int shard);

/* The shards to try for e, in order (docs/sharding.md "Enqueue: which
 * shard"): each but the last with only_present. A group goes to
 * jump(fnv(group), n), first to its shard under `from` while a raise has
 * not settled; a key (no group) to jump(fnv(key), n), first to its shards
 * under each live older count; any other message to the next shard of the
 * view's round robin. v NULL: shard 0 alone. */
typedef struct rd_shard_attempts {
    int shard[RD_SHARD_ATTEMPTS_MAX];
    int n;
} rd_shard_attempts_t;
void rd_shard_view_attempts(rd_shard_view_t *v, const rd_enqueue_t *e, uint64_t now_ms,
                            rd_shard_attempts_t *out);

#endif
