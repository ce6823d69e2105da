/* waiters.h - long-poll claims (docs/long-poll.md): parked claims per queue,
 * served first come, first served, woken by notifications from Redis pub/sub,
 * by this process's own enqueues, and by the promoter as a safety net.
 *
 * A parked claim costs no Redis command while it waits. Its callback runs
 * exactly once: with the claim's result (messages, or none when the wait ran
 * out, or the failure of the claim). */
#ifndef RETRYD_WAITERS_H
#define RETRYD_WAITERS_H

#include <stddef.h>
#include <uv.h>

#include "retryd/http.h"
#include "retryd/redis.h"
#include "retryd/store.h"

typedef struct rd_waiters rd_waiters_t;

/* Borrows store; opens its own notification link to Redis with link's
 * address and credentials (its library and on_ready are ignored). */
rd_waiters_t *rd_waiters_new(uv_loop_t *loop, rd_store_t *store,
                             const rd_redis_options_t *link, const char *prefix);

/* Parks a claim on queue for at most wait_ms. ex is borrowed to see whether
 * the client is still there; cb gets the result exactly once. */
void rd_waiters_park(rd_waiters_t *w, rd_store_queue_t queue, rd_lease_t lease, int count,
                     const char *worker,
                     long long wait_ms, rd_http_exchange_t *ex, rd_store_messages_cb cb, void *arg);

/* Something may be claimable in queue: serve its waiters (no-op without any). */
void rd_waiters_notify(rd_waiters_t *w, rd_store_queue_t queue);

/* While the notification link is down (wake-ups may be missed), serves every
 * queue with waiters once; otherwise does nothing. The timer calls it each
 * round. */
void rd_waiters_poll_if_deaf(rd_waiters_t *w);

/* Parked claims right now (all queues). */
size_t rd_waiters_count(const rd_waiters_t *w);

/* Shutdown, first step: answers every parked claim with "nothing claimed"
 * (a claim in flight is answered when it completes) and from now on answers
 * a new park at once the same way; notify does nothing. w stays valid, so
 * handlers still running may go on calling it. Idempotent. */
void rd_waiters_stop(rd_waiters_t *w);

/* Shutdown, last step, once nothing can call w any more (the HTTP server has
 * drained): stops w if that was not done, waits for claims in flight, closes
 * the notification link and frees w; on_closed (may be NULL) runs once, from
 * the loop. */
void rd_waiters_close(rd_waiters_t *w, void (*on_closed)(void *arg), void *arg);

#endif
