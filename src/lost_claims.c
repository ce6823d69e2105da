/* lost_claims.c - the list of claims whose answer was lost, and the
 * release_lost calls that release what they leased; and the releases of
 * messages claimed for a client that is gone, sent again until Redis answers
 * them (docs/durability.md "A claim whose answer is lost"). */
#include "retryd/lost_claims.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/log.h"

/* The library keeps a claim's record LOST_CLAIM_KEEP_MS after it ran (the
 * literal in 20_claim.lua and 35_batch.lua). An entry leaves the list only
 * when a release_lost for it was answered; past LOST_MAX entries the oldest
 * is dropped (its messages' leases run out instead, as before). */
enum { LOST_MAX = 1024, LOST_PER_CALL = 10, LOST_CLAIM_KEEP_MS = 15000 };

typedef struct lost_claim {
    char *queue;                /* owned */
    size_t len;
    int shard;                  /* the queue's shard the claim went to */
    char nonce[RD_STORE_NONCE_MAX];
} lost_claim_t;

/* A release of what was claimed for a client that is gone (a departed
 * long-poll, an answer not delivered) whose call ended without an answer, or
 * could not be sent: sent again by rd_lost_claims_flush until Redis answers
 * it. `release` only takes a message still under the lease it names, so
 * sending it again after one that ran changes nothing. At most ORPHANS_MAX
 * wait; past that the oldest is dropped (its leases expire instead). */
enum { ORPHANS_MAX = 1024 };

typedef struct orphans {
    struct orphans *next;
    struct rd_lost_claims *lc;
    char *queue;                /* owned */
    size_t len, n;
    rd_message_t msgs[RD_CLAIM_COUNT_MAX];  /* id and lease_token (owned) only */
} orphans_t;

struct rd_lost_claims {
    rd_store_t *st;
    lost_claim_t *lost;         /* oldest first */
    size_t nlost;
    orphans_t *orphans, *orphans_tail;     /* releases to send again, oldest first */
    size_t norphans;
};

/* One release_lost in flight: what it carried, put back if it fails. */
typedef struct lost_release {
    rd_lost_claims_t *lc;
    size_t n;
    lost_claim_t claims[LOST_PER_CALL];
} lost_release_t;

/* Keeps a claim whose answer was lost for rd_lost_claims_flush. */
static void lose_claim(rd_lost_claims_t *lc, const char *queue, size_t len, int shard,
                       const char *nonce)
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
    l->shard = shard;
    snprintf(l->nonce, sizeof l->nonce, "%s", nonce);
}

static void on_claim_lost(void *arg, rd_store_queue_t q, const char *nonce)
{
    lose_claim(arg, q.name, q.len, q.shard, nonce);
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
            lose_claim(b->lc, b->claims[i].queue, b->claims[i].len, b->claims[i].shard,
                       b->claims[i].nonce);
    }
    for (size_t i = 0; i < b->n; i++) rd_free(b->claims[i].queue);
    rd_free(b);
}

/* ---------------------------------------------------------------- orphans */

static void orphans_free(orphans_t *o)
{
    for (size_t i = 0; i < o->n; i++) rd_free((char *)o->msgs[i].lease_token.ptr);
    rd_free(o->queue);
    rd_free(o);
}

static void keep_orphans(rd_lost_claims_t *lc, orphans_t *o)
{
    if (lc->norphans == ORPHANS_MAX) {
        orphans_t *old = lc->orphans;
        rd_warn("store: more than %d hand-backs of departed clients' messages wait for Redis; "
                "the oldest (queue \"%.*s\") is dropped: its leases will expire instead",
                ORPHANS_MAX, (int)old->len, old->queue);
        lc->orphans = old->next;
        if (lc->orphans == NULL) lc->orphans_tail = NULL;
        lc->norphans--;
        orphans_free(old);
    }
    o->next = NULL;
    if (lc->orphans_tail) lc->orphans_tail->next = o;
    else lc->orphans = o;
    lc->orphans_tail = o;
    lc->norphans++;
}

static void on_orphans_released(const rd_store_released_t *res, void *arg)
{
    orphans_t *o = arg;
    if (res->head.status == RD_STORE_OK || res->head.status == RD_STORE_ERROR) {
        /* Done, or Redis refused it: asking again would not help. */
        if (res->head.status == RD_STORE_ERROR)
            rd_warn("store: handing back messages of a departed client in queue \"%.*s\" "
                    "failed (%.*s); their leases will expire instead", (int)o->len, o->queue,
                    (int)res->head.detail.len, res->head.detail.ptr ? res->head.detail.ptr : "");
        orphans_free(o);
        return;
    }
    /* No answer (the link dropped, or the call was not sent after all). */
    rd_warn("store: handing back messages of a departed client in queue \"%.*s\" got no "
            "answer; sending it again when Redis answers", (int)o->len, o->queue);
    keep_orphans(o->lc, o);
}

static void send_orphans(rd_lost_claims_t *lc, orphans_t *o)
{
    rd_store_queue_t q = { .name = o->queue, .len = o->len };
    if (rd_store_release(lc->st, q, o->n, o->msgs, on_orphans_released, o) != 0)
        keep_orphans(lc, o);
}

static void on_release_orphans(void *arg, rd_store_queue_t q, size_t n, const rd_message_t *msgs)
{
    rd_lost_claims_t *lc = arg;
    for (size_t from = 0; from < n; from += RD_CLAIM_COUNT_MAX) {
        size_t batch = n - from < RD_CLAIM_COUNT_MAX ? n - from : RD_CLAIM_COUNT_MAX;
        orphans_t *o = rd_calloc(1, sizeof *o);
        o->lc = lc;
        o->queue = rd_strndup(q.name, q.len);
        o->len = q.len;
        o->n = batch;
        for (size_t i = 0; i < batch; i++) {
            const rd_message_t *m = &msgs[from + i];
            o->msgs[i].id = m->id;
            o->msgs[i].lease_token.ptr =
                rd_strndup(m->lease_token.ptr ? m->lease_token.ptr : "", m->lease_token.len);
            o->msgs[i].lease_token.len = m->lease_token.len;
        }
        send_orphans(lc, o);
    }
}

/* The releases kept by keep_orphans, sent again oldest first; one that
 * fails to send goes back to the end of the list. */
static void flush_orphans(rd_lost_claims_t *lc)
{
    size_t n = lc->norphans;
    while (n-- > 0 && lc->orphans && rd_store_ready(lc->st)) {
        orphans_t *o = lc->orphans;
        lc->orphans = o->next;
        if (lc->orphans == NULL) lc->orphans_tail = NULL;
        lc->norphans--;
        send_orphans(lc, o);
    }
}

void rd_lost_claims_flush(rd_lost_claims_t *lc)
{
    flush_orphans(lc);
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
        int shard = first->shard;
        for (size_t i = 0; i < lc->nlost; i++) {
            lost_claim_t *l = &lc->lost[i];
            if (b->n < LOST_PER_CALL && l->len == len && l->shard == shard &&
                memcmp(l->queue, queue, len) == 0)
                b->claims[b->n++] = *l;
            else
                lc->lost[kept++] = *l;
        }
        lc->nlost = kept;
        const char *nonces[LOST_PER_CALL];
        for (size_t i = 0; i < b->n; i++) nonces[i] = b->claims[i].nonce;
        rd_store_queue_t q = { .name = b->claims[0].queue, .len = b->claims[0].len,
                               .shard = b->claims[0].shard };
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
    rd_store_set_orphans_hook(st, on_release_orphans, lc);
    return lc;
}

void rd_lost_claims_free(rd_lost_claims_t *lc)
{
    if (lc == NULL) return;
    rd_store_set_lost_claim_hook(lc->st, NULL, NULL);
    rd_store_set_orphans_hook(lc->st, NULL, NULL);
    while (lc->orphans) {
        orphans_t *o = lc->orphans;
        lc->orphans = o->next;
        orphans_free(o);
    }
    for (size_t i = 0; i < lc->nlost; i++) rd_free(lc->lost[i].queue);
    rd_free(lc->lost);
    rd_free(lc);
}
