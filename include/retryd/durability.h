/* durability.h - the check of Redis's persistence and eviction settings at
 * each connect (docs/durability.md). Above the store: it reads them with the
 * store's CONFIG GET. */
#ifndef RETRYD_DURABILITY_H
#define RETRYD_DURABILITY_H

#include "retryd/store.h"

/* Reads Redis's persistence and eviction settings and logs a warning for
 * each that could lose messages: no AOF, appendfsync no, or an eviction
 * policy other than noeviction. Silent (a debug line) when CONFIG is not
 * allowed. */
void rd_durability_check(rd_store_t *st);

#endif
