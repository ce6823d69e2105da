/* registry.h - what this process keeps of the registry and the timer
 * schedule (docs/design.md "Timers and the registry"): which queues it
 * registered lately, the timer hints and series nudges it forwards with the
 * store's `register`, and the registrations that failed, sent again each
 * timer round. It sits above the store and hears of every write through the
 * store's write hooks (rd_store_set_write_hooks). */
#ifndef RETRYD_REGISTRY_H
#define RETRYD_REGISTRY_H

#include <stdbool.h>
#include <uv.h>

#include "retryd/store.h"

typedef struct rd_registry rd_registry_t;

/* Borrows st (until rd_registry_free) and installs itself as its write
 * hooks. series: writes nudge the timer to tick their queue about once a
 * minute, so its time series is sampled (--series, docs/series.md). */
rd_registry_t *rd_registry_new(uv_loop_t *loop, rd_store_t *st, bool series);
/* Uninstalls the hooks. Only once the store's link has closed, so that every
 * registration has been answered. */
void rd_registry_free(rd_registry_t *reg);

/* Registers q as an enqueue does (now and then, not on every call). */
void rd_registry_queue(rd_registry_t *reg, rd_store_queue_t q);
/* Registers q and, with in_ms >= 0, has the timer tick it within in_ms.
 * Fire and forget: a failure is kept for rd_registry_flush_owed. */
void rd_registry_schedule(rd_registry_t *reg, rd_store_queue_t q, long long in_ms);
/* Sends again every registration and timer hint that failed (each timer
 * round); no-op while Redis is not ready. */
void rd_registry_flush_owed(rd_registry_t *reg);

#endif
