/* redrive.h - dead letters of one queue into another (docs/reference.md "Redrive"; the protocol is docs/dead-letters.md §4). */
#ifndef RETRYD_REDRIVE_H
#define RETRYD_REDRIVE_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/store.h"

/* Redrives the dead letters of `source` that mode selects ("ids" with ids[0..n),
 * "all", or "error" with needle) into `target`, one bounded batch at a time:
 * each batch is taken out of the source's dead index into its redriving
 * state, enqueued in the target (idempotent per source letter), then removed
 * from the source. Letters a cut call left redriving are completed first, to
 * the target they were taken for. res->replayed counts the letters moved.
 * mode, ids and needle are borrowed until the callback; go_on as for
 * rd_replay_all. Returns -1 (and never calls cb) when nothing could be
 * sent. */
int rd_redrive_run(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                   const char *mode, const long long *ids, size_t n, const char *needle,
                   bool (*go_on)(void *arg), rd_store_replayed_cb cb, void *arg);

/* A paced redrive (the message move tasks, src/moves.c): as rd_redrive_run
 * with mode "all" or "move" (target empty with "move": each letter to its
 * origin queue), each take looking at most limit (1..1000) dead letters.
 * After every batch, before the next take, gate(r, moved, arg) runs with
 * the letters that batch moved; the caller answers rd_redrive_resume(r, go)
 * exactly once, at once or later (a timer), go false ending the redrive
 * (cb with RD_STORE_UNAVAILABLE). cb's replayed counts every letter moved.
 * mode is borrowed until cb. Returns -1 (and never calls cb or gate) when
 * nothing could be sent. */
typedef struct rd_redrive rd_redrive_t;
typedef void (*rd_redrive_gate_cb)(rd_redrive_t *r, long long moved, void *arg);
int rd_redrive_paced(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                     const char *mode, int limit, rd_redrive_gate_cb gate,
                     rd_store_replayed_cb cb, void *arg);
void rd_redrive_resume(rd_redrive_t *r, bool go);

#endif
