/* shards.h - the arithmetic of a queue spread over shards (docs/sharding.md):
 * the hash that places a group or an idempotency key, the ids that name
 * their shard, and the shard prefix of a listing's cursor. Pure: no Redis,
 * no allocation but into the caller's buffer. */
#ifndef RETRYD_SHARDS_H
#define RETRYD_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retryd/buf.h"

enum {
    RD_SHARDS_MAX = 64,          /* policy shards: 1..RD_SHARDS_MAX */
    RD_SHARD_SALT_MAX = 65535,   /* a shard's salt: 0..RD_SHARD_SALT_MAX */
};

/* Ids of shard k are k * RD_SHARD_SPAN + n, n from 1 to RD_SHARD_SPAN - 1
 * (docs/sharding.md "Ids"); lua/00_common.lua SHARD_SPAN is the same. */
#define RD_SHARD_SPAN 10000000000000LL

/* 32-bit FNV-1a of bytes[0..len). */
uint32_t rd_shards_fnv(const void *bytes, size_t len);

/* The jump consistent hash of hash over n shards (1..RD_SHARDS_MAX): 0..n-1.
 * Raising n to m moves (m-n)/m of the hashes, each to a new shard. */
int rd_shards_jump(uint32_t hash, int n);

/* jump(fnv(bytes), n): the shard of a group or an idempotency key. */
int rd_shards_pick(const void *bytes, size_t len, int n);

/* Shard k's n-th id, or -1 when k is not 0..RD_SHARDS_MAX-1 or n is not
 * 1..RD_SHARD_SPAN-1. */
long long rd_shards_id(int shard, long long n);

/* True when id is one some shard can hand out. */
bool rd_shards_id_valid(long long id);

/* The shard of a valid id (0 for every id of a 1-shard queue), or -1. */
int rd_shards_of_id(long long id);

/* The shard's own counter value n of a valid id, or -1. */
long long rd_shards_local(long long id);

/* Appends "s<k>.<cursor>" to out: the cursor of a page across shards, which
 * goes on in shard k from that shard's own cursor. */
void rd_shards_cursor_format(rd_buf_t *out, int shard, const char *cursor, size_t len);

/* Reads a page cursor: "s<k>.<rest>" (k 0..RD_SHARDS_MAX-1, no leading zero)
 * sets *shard to k and *rest to what follows the '.'; a cursor without the
 * prefix (one issued before the queue had shards) is shard 0's, whole.
 * Returns -1 for "s<digits>." naming no shard, else 0. */
int rd_shards_cursor_parse(const char *cursor, size_t len, int *shard, const char **rest,
                           size_t *rest_len);

#endif
