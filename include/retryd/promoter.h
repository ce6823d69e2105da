/* promoter.h - the timer that keeps queues moving: it reclaims expired leases,
 * promotes due scheduled ids to the ready list and applies retention, with one
 * `tick` FCALL per queue the timer schedule names as due; an idle queue costs
 * nothing (docs/design.md "Timers and the registry").
 *
 * Each round: send again the registrations that failed, take the due queues
 * (timer_take, which also runs the registry sweep), tick each, report what the
 * ticks found (timer_done). It decides its own next wake-up: after a full
 * batch it runs again at once; otherwise it sleeps until the earliest due
 * time it heard of, never longer than tick_ms. One call is in flight at a
 * time; errors are logged and retried on the next tick, never fatal. */
#ifndef RETRYD_PROMOTER_H
#define RETRYD_PROMOTER_H

#include <uv.h>

#include "retryd/store.h"

typedef struct rd_promoter rd_promoter_t;

/* The registry sweep (docs/design.md "Timers and the registry"): for all
 * instances together, at most RD_SWEEP_BATCH registered queues are made due
 * every RD_SWEEP_EVERY_MS, and a full pass starts at most every
 * RD_SWEEP_CYCLE_MS. */
enum {
    RD_SWEEP_BATCH = 100,
    RD_SWEEP_EVERY_MS = 1000,
    RD_SWEEP_CYCLE_MS = 60000,
};

typedef struct rd_promoter_options {
    int tick_ms;                  /* longest sleep between rounds */
    int batch;                    /* most ids moved per kind of work per call */
    long long dead_ttl_ms;        /* 0 keeps dead letters forever */
    long long succeeded_ttl_ms;   /* 0 keeps succeeded messages forever */
    /* NULL, or told after each tick of a queue with claimable messages (the
     * long-poll safety net). */
    void (*on_claimable)(rd_store_queue_t queue, void *arg);
    void *on_claimable_arg;
    /* NULL, or called at the start of every round (what failed to reach
     * Redis is sent again: registry.h, lost_claims.h; the long-poll safety
     * net while the notification link is down). */
    void (*on_round)(void *arg);
    void *on_round_arg;
    /* NULL, or told of each queue with alerts this instance should deliver:
     * its tick found alerts to the queue's own alert_url (any instance sends
     * those), or, with alert_url, alerts for --alert-url, or timer_take
     * handed the queue over (rd_store_set_alerts). A tick that found alerts
     * for --alert-url in an instance without it hands them over instead. */
    void (*on_alerts)(rd_store_queue_t queue, void *arg);
    void *on_alerts_arg;
    /* A tick found letters waiting to move to another queue (deaths moving to
     * the dead_letter_queue, rd_store_tick_t.moving): dlq.h moves them. */
    void (*on_moving)(rd_store_queue_t queue, void *arg);
    void *on_moving_arg;
    bool alert_url;               /* this instance runs with --alert-url */
} rd_promoter_options_t;

/* Starts the first round at once. Borrows store until stopped. */
rd_promoter_t *rd_promoter_start(uv_loop_t *loop, rd_store_t *store,
                                 const rd_promoter_options_t *opts);

/* Stops after the call in flight, if any, has completed; on_stopped runs once
 * from the loop, and then the promoter is freed. */
void rd_promoter_stop(rd_promoter_t *p, void (*on_stopped)(void *arg), void *arg);

#endif
