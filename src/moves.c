/* moves.c - running message move tasks (docs/sqs.md "Message move tasks"):
 * each task here is one paced redrive (redrive.h, mode "move") whose
 * batches the runner reports to its task in Redis (move_report: the count,
 * the lease renewed, a cancel seen), and a look at the registry's watch
 * list that takes over the tasks of runners that died. */
#include "retryd/moves.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/redrive.h"

typedef struct task {
    rd_moves_t *m;
    struct task *next;
    char *source, *dest;        /* owned; dest "" : each letter's origin */
    size_t source_len, dest_len;
    long long id, rate;
    long long gated;            /* letters the gate heard of (reported, or about to be) */
    long long unreported;       /* of them, not yet in a report */
    uint64_t began_ms;          /* uv_now when this runner began it: the pace's origin */
    uv_timer_t timer;           /* holds the next batch to the pace */
    rd_redrive_t *held;         /* the redrive waiting for the pace or the report */
    bool cancelling;            /* a report answered CANCELLING */
    bool lost;                  /* another runner has it, or it is gone */
    bool unsure;                /* a report went unanswered: release it */
} task_t;

struct rd_moves {
    uv_loop_t *loop;
    rd_store_t *st;
    char runner[33];            /* random hex, this process's */
    task_t *tasks;
    size_t refs;                /* tasks, starts and looks in flight */
    size_t looking;             /* claims of the current look in flight, +1 for move_due */
    uint64_t next_look_ms;
    bool stopping, freed;
};

static void unref(rd_moves_t *m)
{
    if (--m->refs == 0 && m->freed) rd_free(m);
}

rd_moves_t *rd_moves_new(uv_loop_t *loop, rd_store_t *st)
{
    rd_moves_t *m = rd_calloc(1, sizeof *m);
    m->loop = loop;
    m->st = st;
    unsigned char r[16];
    if (uv_random(NULL, NULL, r, sizeof r, 0, NULL) != 0) {
        uint64_t t = uv_hrtime() ^ ((uint64_t)uv_os_getpid() << 32);
        memset(r, 0, sizeof r);
        memcpy(r, &t, sizeof t);
    }
    for (size_t i = 0; i < sizeof r; i++) snprintf(m->runner + 2 * i, 3, "%02x", r[i]);
    return m;
}

static rd_store_queue_t source_of(const task_t *t)
{
    return (rd_store_queue_t){ .name = t->source, .len = t->source_len };
}

/* ---------------------------------------------------------------- a task's end */

static void on_task_closed(uv_handle_t *h)
{
    task_t *t = h->data;
    rd_moves_t *m = t->m;
    rd_free(t->source);
    rd_free(t->dest);
    rd_free(t);
    unref(m);
}

static void drop_task(task_t *t)
{
    rd_moves_t *m = t->m;
    for (task_t **p = &m->tasks; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    uv_close((uv_handle_t *)&t->timer, on_task_closed);
}

static void on_final(const rd_store_strings_t *res, void *arg)
{
    task_t *t = arg;
    if (res->head.status != RD_STORE_OK)
        rd_warn("moves: task %lld of %.*s: its last report failed; its lease runs out instead",
                t->id, (int)t->source_len, t->source);
    drop_task(t);
}

/* The redrive ended: the last report (what the gate did not hear of, and
 * how it ended), then the task leaves this instance. */
static void on_redrive_end(const rd_store_replayed_t *res, void *arg)
{
    task_t *t = arg;
    rd_moves_t *m = t->m;
    if (t->lost) {
        drop_task(t);
        return;
    }
    const char *end = "release", *reason = "";
    char detail[200] = "";
    if (t->cancelling) {
        end = "CANCELLED";
    } else if (m->stopping || t->unsure) {
        end = "release";
    } else if (res->head.status == RD_STORE_OK) {
        end = "COMPLETED";
    } else if (res->head.status == RD_STORE_ERROR || res->head.status == RD_STORE_BAD_CURSOR) {
        end = "FAILED";
        snprintf(detail, sizeof detail, "%.*s", (int)res->head.detail.len,
                 res->head.detail.ptr ? res->head.detail.ptr : "redrive failed");
        reason = detail;
    }
    long long moved = res->replayed - t->gated;
    if (moved < 0) moved = 0;
    rd_info("moves: task %lld of %.*s: %s after %lld moved here", t->id, (int)t->source_len,
            t->source, end, res->replayed);
    if (rd_store_move_report(m->st, source_of(t), t->id, m->runner, moved, RD_MOVES_LEASE_MS, end,
                             reason, on_final, t) != 0)
        drop_task(t);
}

/* ---------------------------------------------------------------- the pace */

/* How long the next batch waits so that the letters moved here stay at
 * most rate per second since this runner began. */
static uint64_t pace_delay_ms(const task_t *t)
{
    if (t->rate <= 0) return 0;
    uint64_t due = t->began_ms + (uint64_t)(t->gated * 1000 / t->rate);
    uint64_t now = uv_now(t->m->loop);
    return due > now ? due - now : 0;
}

static void on_reported(const rd_store_strings_t *res, void *arg)
{
    task_t *t = arg;
    rd_redrive_t *r = t->held;
    t->held = NULL;
    if (res->head.status != RD_STORE_OK || res->count < 1 || res->strings[0].ptr == NULL) {
        t->unsure = true;
        rd_redrive_resume(r, false);
        return;
    }
    const rd_str_t *code = &res->strings[0];
    if (code->len == 4 && memcmp(code->ptr, "lost", 4) == 0) {
        t->lost = true;
        rd_redrive_resume(r, false);
        return;
    }
    const rd_str_t *status = res->count > 1 ? &res->strings[1] : NULL;
    if (status && status->len == 10 && memcmp(status->ptr, "CANCELLING", 10) == 0) {
        t->cancelling = true;
        rd_redrive_resume(r, false);
        return;
    }
    rd_redrive_resume(r, !t->m->stopping);
}

/* The batch's report (its count, the lease renewed), right before the next
 * batch: a cancel asked meanwhile stops the task before it moves more. */
static void report_batch(task_t *t)
{
    long long moved = t->unreported;
    t->unreported = 0;
    if (rd_store_move_report(t->m->st, source_of(t), t->id, t->m->runner, moved,
                             RD_MOVES_LEASE_MS, NULL, NULL, on_reported, t) != 0) {
        rd_redrive_t *r = t->held;
        t->held = NULL;
        t->unsure = true;
        t->gated -= moved;   /* the last report carries it */
        rd_redrive_resume(r, false);
    }
}

static void on_pace(uv_timer_t *timer)
{
    task_t *t = timer->data;
    if (t->m->stopping) {
        rd_redrive_t *r = t->held;
        t->held = NULL;
        t->gated -= t->unreported;
        t->unreported = 0;
        rd_redrive_resume(r, false);
        return;
    }
    report_batch(t);
}

/* After each batch: wait for the pace, then report and go on. */
static void gate(rd_redrive_t *r, long long moved, void *arg)
{
    task_t *t = arg;
    t->gated += moved;
    t->unreported += moved;
    t->held = r;
    uint64_t wait = pace_delay_ms(t);
    if (wait == 0 || t->m->stopping) report_batch(t);
    else uv_timer_start(&t->timer, on_pace, wait, 0);
}

/* ---------------------------------------------------------------- running one */

static bool runs_here(const rd_moves_t *m, rd_store_queue_t source)
{
    for (const task_t *t = m->tasks; t; t = t->next)
        if (t->source_len == source.len && memcmp(t->source, source.name, source.len) == 0)
            return true;
    return false;
}

static void run(rd_moves_t *m, rd_store_queue_t source, const rd_store_move_task_t *task)
{
    task_t *t = rd_calloc(1, sizeof *t);
    t->m = m;
    t->source = rd_strndup(source.name, source.len);
    t->source_len = source.len;
    t->dest = rd_strndup(task->destination.ptr ? task->destination.ptr : "",
                         task->destination.len);
    t->dest_len = task->destination.len;
    t->id = task->id;
    t->rate = task->rate;
    t->began_ms = uv_now(m->loop);
    uv_timer_init(m->loop, &t->timer);
    t->timer.data = t;
    t->next = m->tasks;
    m->tasks = t;
    m->refs++;
    int limit = t->rate > 0 && t->rate < RD_MOVES_BATCH_MAX ? (int)t->rate : RD_MOVES_BATCH_MAX;
    rd_store_queue_t dest = { .name = t->dest, .len = t->dest_len };
    if (rd_redrive_paced(m->st, source, dest, "move", limit, gate, on_redrive_end, t) != 0) {
        rd_warn("moves: task %lld of %.*s could not start here; its lease runs out", t->id,
                (int)source.len, source.name);
        drop_task(t);
    }
}

/* ---------------------------------------------------------------- starting one */

typedef struct start {
    rd_moves_t *m;
    char *source, *dest;
    size_t source_len, dest_len;
    long long rate;
    rd_moves_started_cb cb;
    void *arg;
} start_t;

static void start_done(start_t *s, rd_moves_started_t *res)
{
    rd_moves_t *m = s->m;
    s->cb(res, s->arg);
    rd_free(s->source);
    rd_free(s->dest);
    rd_free(s);
    unref(m);
}

static void on_started(const rd_store_strings_t *res, void *arg)
{
    start_t *s = arg;
    rd_moves_started_t out = { .status = res->head.status };
    if (out.status == RD_STORE_OK) {
        const rd_str_t *f = res->strings;
        char id[24] = "";
        if (res->count >= 2 && f[0].ptr && f[1].ptr && f[1].len < sizeof id)
            memcpy(id, f[1].ptr, f[1].len);
        out.id = atoll(id);
        if (out.id <= 0 || f[0].ptr == NULL) {
            out.status = RD_STORE_ERROR;
        } else if (f[0].len == 7 && memcmp(f[0].ptr, "running", 7) == 0) {
            out.running = true;
        } else if (res->count >= 4 && !s->m->stopping) {
            rd_store_move_task_t task = {
                .id = out.id, .destination = { s->dest, s->dest_len }, .rate = s->rate,
            };
            run(s->m, (rd_store_queue_t){ .name = s->source, .len = s->source_len }, &task);
        }
    }
    start_done(s, &out);
}

/* The watch entry first (due at once: the next look moves it to the
 * lease's end), so that no task is ever unwatched. */
static void on_watched(const rd_store_strings_t *res, void *arg)
{
    start_t *s = arg;
    if (res->head.status != RD_STORE_OK) {
        rd_moves_started_t out = { .status = res->head.status };
        start_done(s, &out);
        return;
    }
    rd_store_queue_t source = { .name = s->source, .len = s->source_len }, dest = { .name = s->dest, .len = s->dest_len };
    if (rd_store_move_start(s->m->st, source, dest, s->rate, s->m->runner, RD_MOVES_LEASE_MS,
                            on_started, s) != 0) {
        rd_moves_started_t out = { .status = RD_STORE_UNAVAILABLE };
        start_done(s, &out);
    }
}

int rd_moves_start(rd_moves_t *m, rd_store_queue_t source, rd_store_queue_t destination,
                   long long rate, rd_moves_started_cb cb, void *arg)
{
    if (m->stopping || rate < 0 || rate > RD_STORE_MOVE_RATE_MAX) return -1;
    start_t *s = rd_calloc(1, sizeof *s);
    *s = (start_t){ .m = m, .source = rd_strndup(source.name, source.len),
                    .source_len = source.len,
                    .dest = rd_strndup(destination.name ? destination.name : "", destination.len),
                    .dest_len = destination.len, .rate = rate, .cb = cb, .arg = arg };
    if (rd_store_move_watch(m->st, source, 0, -1, on_watched, s) != 0) {
        rd_free(s->source);
        rd_free(s->dest);
        rd_free(s);
        return -1;
    }
    m->refs++;
    return 0;
}

/* ---------------------------------------------------------------- the look */

typedef struct look {
    rd_moves_t *m;
    char *source;
    size_t source_len;
    long long score;            /* its watch entry's, as move_due answered */
} look_t;

static void look_done(rd_moves_t *m)
{
    m->looking--;
    unref(m);
}

static void on_rewatched(const rd_store_strings_t *res, void *arg)
{
    (void)res;
    look_done(arg);
}

static void on_claimed(const rd_store_strings_t *res, void *arg)
{
    look_t *l = arg;
    rd_moves_t *m = l->m;
    rd_store_queue_t source = { .name = l->source, .len = l->source_len };
    long long at = -2;          /* -2: leave the entry; -1: drop it; else move it there */
    const rd_str_t *f = res->strings;
    if (res->head.status == RD_STORE_OK && res->count >= 1 && f[0].ptr) {
        char until[24] = "";
        if (res->count >= 2 && f[1].ptr && f[1].len < sizeof until) memcpy(until, f[1].ptr, f[1].len);
        rd_store_move_task_t task;
        if (f[0].len == 4 && memcmp(f[0].ptr, "none", 4) == 0) {
            at = -1;
        } else if (f[0].len == 4 && memcmp(f[0].ptr, "busy", 4) == 0) {
            at = atoll(until);
        } else if (f[0].len == 2 && memcmp(f[0].ptr, "ok", 2) == 0 &&
                   rd_store_move_task_at(res, 2, &task)) {
            at = atoll(until);
            if (!runs_here(m, source) && !m->stopping) {
                rd_info("moves: taking over task %lld of %.*s (%lld moved so far)", task.id,
                        (int)source.len, source.name, task.moved);
                run(m, source, &task);
            }
        }
    }
    long long expect = at == -1 ? l->score : -1;
    bool sent = at != -2 && rd_store_move_watch(m->st, source, at, expect, on_rewatched, m) == 0;
    rd_free(l->source);
    rd_free(l);
    if (!sent) look_done(m);
}

static void on_due(const rd_store_strings_t *res, void *arg)
{
    rd_moves_t *m = arg;
    if (res->head.status == RD_STORE_OK && !m->stopping) {
        for (size_t i = 0; i + 1 < res->count; i += 2) {
            const rd_str_t *name = &res->strings[i], *score = &res->strings[i + 1];
            if (name->ptr == NULL || score->ptr == NULL || score->len >= 24) continue;
            char sc[24];
            memcpy(sc, score->ptr, score->len);
            sc[score->len] = '\0';
            look_t *l = rd_malloc(sizeof *l);
            *l = (look_t){ m, rd_strndup(name->ptr, name->len), name->len, atoll(sc) };
            rd_store_queue_t source = { .name = l->source, .len = l->source_len };
            m->looking++;
            m->refs++;
            if (rd_store_move_claim(m->st, source, m->runner, RD_MOVES_LEASE_MS, on_claimed, l) != 0) {
                rd_free(l->source);
                rd_free(l);
                look_done(m);
            }
        }
    }
    look_done(m);
}

void rd_moves_look(rd_moves_t *m)
{
    uint64_t now = uv_now(m->loop);
    if (m->stopping || m->looking > 0 || now < m->next_look_ms) return;
    m->next_look_ms = now + RD_MOVES_LOOK_MS;
    if (rd_store_move_due(m->st, 100, on_due, m) != 0) return;
    m->looking++;
    m->refs++;
}

/* ---------------------------------------------------------------- stopping */

void rd_moves_stop(rd_moves_t *m)
{
    if (m == NULL || m->stopping) return;
    m->stopping = true;
    /* A task waiting for its pace ends now (and releases its lease); one in
     * a batch ends after it (its report sees stopping). */
    for (task_t *t = m->tasks, *next; t; t = next) {
        next = t->next;
        if (t->held && uv_is_active((uv_handle_t *)&t->timer)) {
            uv_timer_stop(&t->timer);
            on_pace(&t->timer);
        }
    }
}

void rd_moves_free(rd_moves_t *m)
{
    if (m == NULL) return;
    rd_moves_stop(m);
    m->freed = true;
    if (m->refs == 0) rd_free(m);
}
