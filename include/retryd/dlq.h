/* dlq.h - the moves of deaths to a queue's dead_letter_queue (docs/lifecycle.md
 * "Dead-letter queue"). A death leaves the letter in its source's redriving
 * state with the target recorded, in the death's own atomic call; the timer's
 * tick of the source says how many wait (rd_store_tick_t.moving), and this
 * module completes them with the redrive protocol (redrive.h, mode "left"),
 * exactly once per letter whatever instance runs it or dies meanwhile. Above
 * the store; same async rule as store.h. */
#ifndef RETRYD_DLQ_H
#define RETRYD_DLQ_H

#include "retryd/store.h"

typedef struct rd_dlq rd_dlq_t;

rd_dlq_t *rd_dlq_new(rd_store_t *st);
/* Moves q's waiting letters, unless a move of q by this instance is under way
 * (at most RD_DLQ_MOVES_MAX queues at once; the next tick asks again). */
void rd_dlq_move(rd_dlq_t *d, rd_store_queue_t q);
/* No new move starts; the ones under way stop after their batch. */
void rd_dlq_stop(rd_dlq_t *d);
/* Frees d once its moves have ended (now, or when the last one does). */
void rd_dlq_free(rd_dlq_t *d);

enum { RD_DLQ_MOVES_MAX = 64 };

#endif
