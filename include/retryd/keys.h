/* keys.h - Redis key names and the library's function names. The only place
 * in C where a key or a function is spelled.
 *
 * A queue's keys all share the hash tag "{<escaped name>}" so that one Lua call
 * touches one Cluster slot. The escape is injective: '%', '{', '}', ':', bytes
 * below 0x20 and 0x7f become "%XX" (upper-case hex), everything else is kept,
 * so two names never share keys and the tag never contains a brace. */
#ifndef RETRYD_KEYS_H
#define RETRYD_KEYS_H

#include <stddef.h>

#include "retryd/buf.h"

/* Appends the escaped form of name[0..len) to out. */
void rd_keys_escape_queue(rd_buf_t *out, const char *name, size_t len);

/* "<prefix>:{<escaped queue>}": KEYS[1] of every function call. */
void rd_keys_queue_base(rd_buf_t *out, const char *prefix, const char *queue, size_t len);

/* The base of shard k of a queue (docs/sharding.md "Where each key goes"):
 * shard 0 is rd_keys_queue_base's, shard k (1..63) "<prefix>:{<escaped
 * queue>:<k>.<salt>}". The escape turns every ':' of a name into %3A, so no
 * queue's shard 0 is another's shard k. */
void rd_keys_shard_base(rd_buf_t *out, const char *prefix, const char *queue, size_t len,
                        int shard, int salt);

/* "<base>:m:<id>": the message hash (KEYS[2] where the id is known). */
void rd_keys_message(rd_buf_t *out, const char *base, size_t base_len, long long id);

/* "<prefix>:{<escaped queue>}:wake": the pub/sub channel the library
 * publishes to when work may be claimable (queue_keys().wake in Lua). */
void rd_keys_wake(rd_buf_t *out, const char *prefix, const char *queue, size_t len);

/* "<prefix>:queues": the registry SET of queue names (not slot-bound). */
void rd_keys_registry(rd_buf_t *out, const char *prefix);

/* The Functions library's name, which carries its API version, and the name
 * every function of it is registered under: RD_FUNCTION("claim") is
 * "retryd_v2_claim". Redis function names are global across libraries, so
 * two versions (retryd_v2 beside the unversioned "retryd" of older releases,
 * or a later retryd_v3) can be loaded side by side during a rolling upgrade
 * and each daemon calls the functions it was built for (docs/operators.md).
 * Bump the version whenever a function's KEYS, ARGV or reply change. The
 * first line of lua/00_common.lua must name the same library (test_keys
 * checks it); store.c builds every FCALL name from it. */
#define RD_LIBRARY_NAME "retryd_v9"
#define RD_FUNCTION(name) RD_LIBRARY_NAME "_" name

#endif
