/* dlq.c - completing the moves of deaths to a dead_letter_queue: one redrive
 * (mode "left") per source queue at a time in this instance. Another
 * instance may move the same letters at once; the protocol makes that safe
 * (redrive_in answers the id it created before, redrive_done counts once). */
#include "retryd/dlq.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/redrive.h"

typedef struct move {
    rd_dlq_t *d;
    char *queue;                /* owned; NULL: the slot is free */
    size_t queue_len;
} move_t;

struct rd_dlq {
    rd_store_t *st;
    move_t moves[RD_DLQ_MOVES_MAX];
    size_t running;
    bool stopping, freed;
};

rd_dlq_t *rd_dlq_new(rd_store_t *st)
{
    rd_dlq_t *d = rd_calloc(1, sizeof *d);
    d->st = st;
    for (size_t i = 0; i < RD_DLQ_MOVES_MAX; i++) d->moves[i].d = d;
    return d;
}

static bool go_on(void *arg)
{
    const move_t *m = arg;
    return !m->d->stopping;
}

static void on_moved(const rd_store_replayed_t *res, void *arg)
{
    move_t *m = arg;
    rd_dlq_t *d = m->d;
    if (res->head.status == RD_STORE_OK && res->replayed > 0)
        rd_debug("dlq: %.*s moved %lld dead letters", (int)m->queue_len, m->queue, res->replayed);
    else if (res->head.status != RD_STORE_OK && !d->stopping)
        rd_warn("dlq: moving the dead letters of %.*s stopped (%.*s); the next tick goes on",
                (int)m->queue_len, m->queue, (int)res->head.detail.len,
                res->head.detail.ptr ? res->head.detail.ptr : "");
    rd_free(m->queue);
    m->queue = NULL;
    d->running--;
    if (d->freed && d->running == 0) rd_free(d);
}

void rd_dlq_move(rd_dlq_t *d, rd_store_queue_t q)
{
    if (d->stopping) return;
    move_t *slot = NULL;
    for (size_t i = 0; i < RD_DLQ_MOVES_MAX; i++) {
        move_t *m = &d->moves[i];
        if (m->queue == NULL) {
            if (slot == NULL) slot = m;
        } else if (m->queue_len == q.len && memcmp(m->queue, q.name, q.len) == 0) {
            return;  /* under way */
        }
    }
    if (slot == NULL) return;
    slot->queue = rd_strndup(q.name, q.len);
    slot->queue_len = q.len;
    rd_store_queue_t source = { .name = slot->queue, .len = slot->queue_len };
    rd_store_queue_t none = { .name = "", .len = 0 };
    d->running++;
    if (rd_redrive_run(d->st, source, none, "left", NULL, 0, NULL, go_on, on_moved, slot) != 0) {
        rd_free(slot->queue);
        slot->queue = NULL;
        d->running--;
    }
}

void rd_dlq_stop(rd_dlq_t *d)
{
    if (d) d->stopping = true;
}

void rd_dlq_free(rd_dlq_t *d)
{
    if (d == NULL) return;
    d->stopping = true;
    if (d->running == 0) rd_free(d);
    else d->freed = true;
}
