/* hash.h - the one string hash of the daemon's in-memory tables (queue names
 * to buckets in store.c, alerts.c and coalesce.c): 64-bit FNV-1a. Not for
 * anything an attacker must not steer: the tables it spreads are bounded or
 * chained, and their keys are queue names. */
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
