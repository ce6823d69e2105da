/* lost_claims.h - claims whose answer was lost (the link dropped with the
 * call in flight): their nonces, handed to the store's release_lost once the
 * link is back (docs/durability.md "A claim whose answer is lost"). It sits
 * above the store and hears of each such claim through its lost-claim hook
 * (rd_store_set_lost_claim_hook). It also takes over the releases of what
 * was claimed for a client that is gone (rd_store_set_orphans_hook) and sends
 * one that got no answer again until Redis answers it. */
#ifndef RETRYD_LOST_CLAIMS_H
#define RETRYD_LOST_CLAIMS_H

#include "retryd/store.h"

typedef struct rd_lost_claims rd_lost_claims_t;

/* Borrows st (until rd_lost_claims_free) and installs itself as its hook. */
rd_lost_claims_t *rd_lost_claims_new(rd_store_t *st);
/* Uninstalls the hook; what is still listed is dropped (those leases expire). */
void rd_lost_claims_free(rd_lost_claims_t *lc);
/* Sends the kept releases again, then release_lost for every listed claim,
 * at most 10 nonces a call (each timer round); no-op while Redis is not
 * ready. An entry leaves the list only once its call was answered. */
void rd_lost_claims_flush(rd_lost_claims_t *lc);

#endif
