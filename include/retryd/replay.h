/* replay.h - batch replay of dead letters to the end: the store's
 * replay_many again and again, one bounded call at a time (docs/dead-letters.md).
 * Above the store; same async rule as store.h. */
#ifndef RETRYD_REPLAY_H
#define RETRYD_REPLAY_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/store.h"

/* rd_store_replay_many until the cursor ends; res->replayed is the total.
 * mode "ids" (ids[0..n), RD_STORE_REPLAY_IDS_MAX a call), "all" or "error"
 * (needle). ids, mode and needle are borrowed until the callback. go_on
 * (NULL: always) is asked before each further call: false stops with
 * RD_STORE_UNAVAILABLE (the client has gone). A call that makes no progress
 * stops with RD_STORE_ERROR; any other failure stops with that call's
 * status. */
int rd_replay_all(rd_store_t *st, rd_store_queue_t q, const char *mode, const long long *ids,
                  size_t n, const char *needle, bool (*go_on)(void *arg),
                  rd_store_replayed_cb cb, void *arg);

#endif
