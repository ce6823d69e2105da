/* hash.h - the unkeyed string hash of the daemon's bounded in-memory tables
 * (queue names to slots in registry.c, alerts.c and coalesce.c): 64-bit
 * FNV-1a. Not for a table a client can grow with names of its choosing: the
 * long-poll waiters use keyed_hash.h. */
#ifndef RETRYD_HASH_H
#define RETRYD_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t rd_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

#endif
