/* moves.h - message move tasks (docs/sqs.md "Message move tasks"): SQS's
 * StartMessageMoveTask, a paced redrive of a dead-letter queue's letters to
 * their origin queues (or one destination), run by the daemon instance that
 * started it and taken over by another when its runner's lease runs out.
 * The state is in Redis (lua/67_moves.lua), so any instance lists and
 * cancels a task through the store directly. Above the store; same async
 * rule as store.h. */
#ifndef RETRYD_MOVES_H
#define RETRYD_MOVES_H

#include <uv.h>

#include "retryd/store.h"

typedef struct rd_moves rd_moves_t;

enum {
    RD_MOVES_LEASE_MS = 10000,   /* a runner's lease, renewed every batch */
    RD_MOVES_LOOK_MS = 2000,     /* how often rd_moves_look asks about leases */
    RD_MOVES_BATCH_MAX = 100,    /* letters a batch looks at, unpaced */
};

rd_moves_t *rd_moves_new(uv_loop_t *loop, rd_store_t *st);

/* What rd_moves_start answers: status OK with the new task's id (it runs
 * here now), or running (another task is active on the source: id is
 * it); another status when Redis could not say. */
typedef struct rd_moves_started {
    rd_store_status_t status;
    bool running;
    long long id;
} rd_moves_started_t;
typedef void (*rd_moves_started_cb)(const rd_moves_started_t *res, void *arg);

/* Starts a task on source: destination.len 0 sends each letter to its
 * origin queue; rate 1..500 messages per second, 0 unpaced. Returns -1
 * (cb never runs) when nothing could be sent or the module stops. */
int rd_moves_start(rd_moves_t *m, rd_store_queue_t source, rd_store_queue_t destination,
                   long long rate, rd_moves_started_cb cb, void *arg);
/* The promoter's round: at most every RD_MOVES_LOOK_MS, takes over the
 * tasks whose runner's lease ran out. */
void rd_moves_look(rd_moves_t *m);
/* No new task starts or is taken over; the running ones stop after their
 * batch and release their leases (another instance takes them over). */
void rd_moves_stop(rd_moves_t *m);
/* Frees m once its tasks and calls have ended (now, or when the last one
 * does). */
void rd_moves_free(rd_moves_t *m);

#endif
