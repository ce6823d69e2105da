/* queue_lines.h - the table of queue names to the lines of requests that
 * wait for a call of their queue (coalesce.c's settle-and-claims,
 * enqueue_lines.c's enqueues). A line exists only while a call for its
 * queue is in flight or requests wait, so the table is bounded by the calls
 * in flight: 64 buckets, chained, by hash.h's FNV-1a. A line embeds an
 * rd_line_key_t as its first member. */
#ifndef RETRYD_QUEUE_LINES_H
#define RETRYD_QUEUE_LINES_H

#include <stddef.h>

#include "retryd/store.h"

typedef struct rd_line_key {
    struct rd_line_key *next;   /* in its bucket */
    char *name;                 /* owned: the queue's name */
    size_t len;
    int shard;                  /* the queue's shard the line's calls go to (sharding.md) */
} rd_line_key_t;

enum { RD_LINE_BUCKETS = 64 };

typedef struct rd_line_table {
    rd_line_key_t *buckets[RD_LINE_BUCKETS];
} rd_line_table_t;

/* The entry of q's shard q.shard, or NULL. */
rd_line_key_t *rd_line_table_find(const rd_line_table_t *t, rd_store_queue_t q);
/* Adds k (not in the table) for q and its shard q.shard, with a copy of
 * q's name. */
void rd_line_table_add(rd_line_table_t *t, rd_line_key_t *k, rd_store_queue_t q);
/* Takes k out and frees its name (k itself is the caller's). */
void rd_line_table_remove(rd_line_table_t *t, rd_line_key_t *k);
/* Takes every entry out, freeing its name, then calls each(k, arg) on it. */
void rd_line_table_clear(rd_line_table_t *t, void (*each)(rd_line_key_t *k, void *arg), void *arg);

#endif
