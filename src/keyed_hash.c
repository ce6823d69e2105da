/* keyed_hash.c - SipHash-2-4 under a random key, by OpenSSL's EVP_MAC
 * (include/retryd/keyed_hash.h says where it is used and why). About
 * 0.1 us a name: the key is set once, each hash re-initialises the MAC
 * with it. */
#include "retryd/keyed_hash.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "retryd/alloc.h"

struct rd_keyed_hash {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;
};

void rd_keyed_hash_free(rd_keyed_hash_t *h)
{
    if (h == NULL) return;
    EVP_MAC_CTX_free(h->ctx);
    EVP_MAC_free(h->mac);
    rd_free(h);
}

rd_keyed_hash_t *rd_keyed_hash_new(void)
{
    rd_keyed_hash_t *h = rd_calloc(1, sizeof *h);
    unsigned char key[16];
    unsigned int size = 8;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_SIZE, &size),
        OSSL_PARAM_construct_end(),
    };
    h->mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
    h->ctx = h->mac ? EVP_MAC_CTX_new(h->mac) : NULL;
    bool ok = h->ctx && RAND_bytes(key, sizeof key) == 1 &&
              EVP_MAC_init(h->ctx, key, sizeof key, params) == 1;
    OPENSSL_cleanse(key, sizeof key);
    if (!ok) {
        rd_keyed_hash_free(h);
        return NULL;
    }
    return h;
}

uint64_t rd_keyed_hash(rd_keyed_hash_t *h, const char *s, size_t len)
{
    unsigned char out[8] = { 0 };
    size_t out_len = 0;
    /* NULL key: the one given at rd_keyed_hash_new. */
    if (EVP_MAC_init(h->ctx, NULL, 0, NULL) != 1 ||
        EVP_MAC_update(h->ctx, (const unsigned char *)s, len) != 1 ||
        EVP_MAC_final(h->ctx, out, &out_len, sizeof out) != 1)
        abort();  /* a MAC that worked at start does not fail on a name */
    uint64_t v;
    memcpy(&v, out, sizeof v);
    return v;
}
