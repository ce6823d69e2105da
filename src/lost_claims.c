/* lost_claims.c - the list of claims whose answer was lost, and the
 * release_lost calls that release what they leased (docs/durability.md
 * "A claim whose answer is lost"). */
#include "retryd/lost_claims.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

/* The library keeps a claim's record LOST_CLAIM_KEEP_MS after it ran (the
 * literal in 20_claim.lua and 35_batch.lua). An entry leaves the list only
 * when a release_lost for it was answered; past LOST_MAX entries the oldest
 * is dropped (its messages' leases run out instead, as before). */
enum { LOST_MAX = 1024, LOST_PER_CALL = 10, LOST_CLAIM_KEEP_MS = 15000 };

typedef struct lost_claim {
    char *queue;                /* owned */
    size_t len;
    char nonce[RD_STORE_NONCE_MAX];
} lost_claim_t;

struct rd_lost_claims {
    rd_store_t *st;
    lost_claim_t *lost;         /* oldest first */
    size_t nlost;
};

/* One release_lost in flight: what it carried, put back if it fails. */
typedef struct lost_release {
    rd_lost_claims_t *lc;
    size_t n;
    lost_claim_t claims[LOST_PER_CALL];
} lost_release_t;

/* Keeps a claim whose answer was lost for rd_lost_claims_flush. */
static void lose_claim(rd_lost_claims_t *lc, const char *queue, size_t len, const char *nonce)
{
    if (lc->nlost == LOST_MAX) {
        rd_warn("store: more than %d claims with a lost answer wait to be handed back; the "
                "oldest (queue \"%.*s\") is dropped: its leases will expire instead", LOST_MAX,
                (int)lc->lost[0].len, lc->lost[0].queue);
        rd_free(lc->lost[0].queue);
        memmove(lc->lost, lc->lost + 1, (lc->nlost - 1) * sizeof *lc->lost);
        lc->nlost--;
    }
    if (lc->lost == NULL) lc->lost = rd_malloc(LOST_MAX * sizeof *lc->lost);
    lost_claim_t *l = &lc->lost[lc->nlost++];
    l->queue = rd_strndup(queue, len);
    l->len = len;
    snprintf(l->nonce, sizeof l->nonce, "%s", nonce);
}

static void on_claim_lost(void *arg, rd_store_queue_t q, const char *nonce)
{
    lose_claim(arg, q.name, q.len, nonce);
}

static void on_lost_released(const rd_store_released_t *res, void *arg)
{
    lost_release_t *b = arg;
    if (res->head.status == RD_STORE_OK) {
        if (res->released > 0)
            rd_warn("store: %lld message(s) of queue \"%.*s\" leased by %zu claim(s) whose "
                    "answer was lost were handed back", res->released, (int)b->claims[0].len,
                    b->claims[0].queue, b->n);
    } else if (res->head.status == RD_STORE_ERROR) {
        /* Redis answered with an error: asking again would not help. */
        rd_warn("store: handing back what %zu claim(s) with a lost answer leased in queue "
                "\"%.*s\" failed (%.*s); their leases will expire instead", b->n,
                (int)b->claims[0].len, b->claims[0].queue, (int)res->head.detail.len,
                res->head.detail.ptr ? res->head.detail.ptr : "");
    } else {
        /* Not done (the link dropped again, or is down): try again next
         * round. */
        for (size_t i = 0; i < b->n; i++)
            lose_claim(b->lc, b->claims[i].queue, b->claims[i].len, b->claims[i].nonce);
    }
    for (size_t i = 0; i < b->n; i++) rd_free(b->claims[i].queue);
    rd_free(b);
}

void rd_lost_claims_flush(rd_lost_claims_t *lc)
{
    /* One call per queue (up to LOST_PER_CALL, the oldest first): they leave
     * the list while the call is out. */
    while (lc->nlost > 0 && rd_store_ready(lc->st)) {
        lost_release_t *b = rd_malloc(sizeof *b);
        b->lc = lc;
        b->n = 0;
        size_t kept = 0;
        const lost_claim_t *first = &lc->lost[0];
        char *queue = first->queue;
        size_t len = first->len;
        for (size_t i = 0; i < lc->nlost; i++) {
            lost_claim_t *l = &lc->lost[i];
            if (b->n < LOST_PER_CALL && l->len == len && memcmp(l->queue, queue, len) == 0)
                b->claims[b->n++] = *l;
            else
                lc->lost[kept++] = *l;
        }
        lc->nlost = kept;
        const char *nonces[LOST_PER_CALL];
        for (size_t i = 0; i < b->n; i++) nonces[i] = b->claims[i].nonce;
        rd_store_queue_t q = { b->claims[0].queue, b->claims[0].len };
        if (rd_store_release_lost(lc->st, q, b->n, nonces, on_lost_released, b) != 0) {
            rd_store_released_t failed = { .head = { .status = RD_STORE_UNAVAILABLE } };
            on_lost_released(&failed, b);
            return;
        }
    }
}

rd_lost_claims_t *rd_lost_claims_new(rd_store_t *st)
{
    rd_lost_claims_t *lc = rd_calloc(1, sizeof *lc);
    lc->st = st;
    rd_store_set_lost_claim_hook(st, on_claim_lost, lc);
    return lc;
}

void rd_lost_claims_free(rd_lost_claims_t *lc)
{
    if (lc == NULL) return;
    rd_store_set_lost_claim_hook(lc->st, NULL, NULL);
    for (size_t i = 0; i < lc->nlost; i++) rd_free(lc->lost[i].queue);
    rd_free(lc->lost);
    rd_free(lc);
}
