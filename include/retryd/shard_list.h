/* shard_list.h - a queue's listings over all its shards (docs/sharding.md
 * "Every API over all shards"): GET /queues/{q}/messages and GET
 * /queues/{q}/groups page through them. On a sharded queue a page reads one
 * shard and its next_cursor is "s<k>.<the shard's cursor>"; a cursor
 * without the prefix is shard 0's (one issued before a raise). A queue of
 * one shard is paged exactly as rd_store_list and rd_store_groups do, its
 * cursors unchanged. A page refused for the daemon's view ({"reshard"}: it
 * has none of a sharded queue, or an older one) reads the view and starts
 * again, once. */
#ifndef RETRYD_SHARD_LIST_H
#define RETRYD_SHARD_LIST_H

#include "retryd/store.h"

enum { RD_SHARD_LIST_CURSOR_MAX = 128 };   /* rd_list_req_t's cursor */

typedef struct rd_shard_list_args {
    const char *status;           /* NULL: every state */
    int limit;                    /* 1..1000 */
    const char *cursor;           /* NULL or "": the first page */
    const char *error_contains;   /* NULL or "": no filter */
    long long since_ms, until_ms; /* < 0: no bound */
} rd_shard_list_args_t;

/* One page of q's messages; total is the listed states' size summed over
 * every shard. As rd_store_list for -1 and cb; a cursor naming no shard is
 * answered RD_STORE_BAD_CURSOR. */
int rd_shard_list(rd_store_t *st, rd_store_queue_t q, const rd_shard_list_args_t *a,
                  rd_store_list_cb cb, void *arg);
/* One page of q's fairness groups: each group once (a group lives on one
 * shard), by name within a shard. As rd_store_groups for -1 and cb. */
int rd_shard_groups(rd_store_t *st, rd_store_queue_t q, const char *cursor, size_t cursor_len,
                    int limit, rd_store_groups_cb cb, void *arg);

#endif
