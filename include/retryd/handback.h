/* handback.h - claimed messages whose answer never reaches the client go
 * straight back (docs/durability.md): a claim answered over HTTP, on the
 * API or the SQS endpoint, watches its delivery, and an answer the client
 * reset before it read it (unwritten, or written and unread) hands the
 * leases back, as a departed long-poll's are,
 * instead of leaving them to expire. */
#ifndef RETRYD_HANDBACK_H
#define RETRYD_HANDBACK_H

#include <stddef.h>

#include "retryd/http.h"
#include "retryd/store.h"

/* Before rd_http_respond(ex, ...) with the claimed messages[0..count):
 * copies their ids and lease tokens; if the answer is not delivered, they
 * are released through *store (read then: NULL once the owner has closed
 * the store, and the leases then expire instead). */
void rd_handback_if_undelivered(rd_http_exchange_t *ex, rd_store_t *const *store,
                                rd_store_queue_t q, const rd_message_t *messages, size_t count);

#endif
