/* keyed_hash.h - a keyed string hash for the tables a client can fill with
 * names of its choosing (the long-poll waiters, one entry per queue name a
 * poll named): SipHash-2-4 by OpenSSL (EVP_MAC "SIPHASH") under a key drawn
 * from RAND_bytes at start, so that nobody can compute, offline, names that
 * all fall into one bucket and make every lookup walk them. hash.h's
 * unkeyed FNV-1a stays for the tables that are bounded or keyed by us. */
#ifndef RETRYD_KEYED_HASH_H
#define RETRYD_KEYED_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct rd_keyed_hash rd_keyed_hash_t;

/* A hash under a fresh random key; NULL only when OpenSSL has no SipHash
 * or no randomness (the caller refuses to start). */
rd_keyed_hash_t *rd_keyed_hash_new(void);
uint64_t rd_keyed_hash(rd_keyed_hash_t *h, const char *s, size_t len);
void rd_keyed_hash_free(rd_keyed_hash_t *h);

#endif
