/* queue_clear.h - emptying a queue to the end: the store's drop_queue (with
 * queue_forget when its data is gone) or purge_all, again and again, one
 * bounded call at a time (docs/reference.md "Dropping and purging a queue").
 * Above the store; same async rule as store.h. */
#ifndef RETRYD_QUEUE_CLEAR_H
#define RETRYD_QUEUE_CLEAR_H

#include <stdbool.h>

#include "retryd/store.h"

typedef enum rd_queue_clear_mode {
    RD_QUEUE_DROP,        /* every key of the queue, then its registry entries */
    RD_QUEUE_PURGE_ALL,   /* every message; the queue, its policy and tags stay */
} rd_queue_clear_mode_t;

/* Calls until a call answers done: res->state RD_CLEAR_DONE, res->deleted
 * the records deleted in all. go_on (NULL: always) is asked before each
 * further call: false stops with RD_STORE_UNAVAILABLE (the client has gone;
 * a drop left so stays marked, and the next drop goes on from there). Any
 * failure stops with that call's status. */
int rd_queue_clear(rd_store_t *st, rd_store_queue_t q, rd_queue_clear_mode_t mode,
                   bool (*go_on)(void *arg), rd_store_cleared_cb cb, void *arg);

#endif
