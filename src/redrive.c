/* redrive.c - dead letters of one queue into another, exactly once.
 *
 * The source and the target may live on different Redis Cluster masters, so
 * no single atomic call can do both. Each batch is four calls, each one
 * atomic function in one slot (lua/65_redrive.lua), and this file only
 * sequences them:
 *   1. redrive_take   (source) dead -> redriving, the target recorded
 *   2. redrive_in     (target) idempotent enqueue, keyed by source queue + id
 *   3. redrive_done   (source) the letters leave the source
 *   4. redrive_forget (target) the idempotency keys expire a day later
 * A call cut anywhere leaves letters in redriving, which the next take on
 * the source answers first (with their recorded target); step 2 answers the
 * same new id again, so each letter lands in its target once. */
#include "retryd/redrive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

/* Ids given to one take (its reply may use fewer, and says how many). */
enum { TAKE_IDS_MAX = RD_STORE_REPLAY_IDS_MAX, TAKE_LIMIT = 1000, STALLS_MAX = 3 };

typedef struct letter {
    long long id, new_id;
    char *target;               /* owned */
    size_t target_len;
    long long max_retries;
    char *payload;              /* owned */
    size_t payload_len;
} letter_t;

typedef struct redrive {
    rd_store_t *st;
    char *source, *target;      /* owned */
    size_t source_len, target_len;
    const char *mode, *needle;  /* borrowed */
    const long long *ids;
    size_t n, offset;           /* ids: how many ids are done */
    size_t given;               /* ids: how many the last take was given */
    char *cursor;               /* all/error: where the next take starts (NULL first) */
    long long moved;
    int stalls;                 /* batches in a row that moved nothing */
    bool (*go_on)(void *arg);
    rd_store_replayed_cb cb;
    void *arg;
    /* the batch in hand */
    letter_t *letters;
    size_t count, run, run_end;
    bool resumed;
    char *next;                 /* the take's next ("" done) */
} redrive_t;

static int take(redrive_t *r);

static void free_batch(redrive_t *r)
{
    for (size_t i = 0; i < r->count; i++) {
        rd_free(r->letters[i].target);
        rd_free(r->letters[i].payload);
    }
    rd_free(r->letters);
    r->letters = NULL;
    r->count = 0;
    rd_free(r->next);
    r->next = NULL;
}

static void finish(redrive_t *r, rd_store_status_t status, const char *detail)
{
    rd_store_replayed_t out = { .head.status = status, .replayed = r->moved };
    if (detail) out.head.detail = (rd_str_t){ detail, strlen(detail) };
    if (status != RD_STORE_OK && r->moved > 0)
        rd_warn("redrive: %.*s -> %.*s stopped after %lld moved", (int)r->source_len, r->source,
                (int)r->target_len, r->target, r->moved);
    r->cb(&out, r->arg);
    free_batch(r);
    rd_free(r->cursor);
    rd_free(r->source);
    rd_free(r->target);
    rd_free(r);
}

/* A call's head that is not OK ends the redrive with it; detail copied. */
static bool failed(redrive_t *r, const rd_store_head_t *head)
{
    if (head->status == RD_STORE_OK) return false;
    char detail[200];
    snprintf(detail, sizeof detail, "%.*s", (int)head->detail.len,
             head->detail.ptr ? head->detail.ptr : "");
    finish(r, head->status, detail);
    return true;
}

static void unexpected(redrive_t *r, const char *what)
{
    char detail[120];
    snprintf(detail, sizeof detail, "unexpected reply to %s", what);
    rd_error("redrive: %s (another version of the library?)", detail);
    finish(r, RD_STORE_ERROR, detail);
}

/* Sends fn on q with argv; a call that cannot be sent ends the redrive. */
static void send_call(redrive_t *r, const char *fn, rd_store_queue_t q, size_t argc,
                 const char **argv, const size_t *lens, rd_store_raw_cb cb)
{
    if (rd_store_fcall(r->st, fn, q, argc, argv, lens, cb, r) != 0)
        finish(r, RD_STORE_UNAVAILABLE, NULL);
}

static rd_store_queue_t source_q(const redrive_t *r)
{
    return (rd_store_queue_t){ r->source, r->source_len };
}

/* After a batch (or an empty take): on to the next take, or the end. */
static void advance(redrive_t *r, bool progressed)
{
    bool done = false;
    if (!r->resumed) {
        /* A selection that moved on (ids used, a new cursor) is progress
         * even when it matched nothing; one that stood still and took
         * nothing would be called again forever. */
        size_t next_len = strlen(r->next);
        if (strcmp(r->mode, "ids") == 0) {
            r->offset += next_len ? strtoul(r->next, NULL, 10) : r->given;
            done = r->offset >= r->n;
        } else if (next_len == 0) {
            done = true;
        } else {
            if (r->cursor && strcmp(r->cursor, r->next) == 0 && !progressed) {
                free_batch(r);
                finish(r, RD_STORE_ERROR, "redrive_take made no progress");
                return;
            }
            rd_free(r->cursor);
            r->cursor = rd_strdup(r->next);
        }
        progressed = true;
    }
    r->stalls = progressed ? 0 : r->stalls + 1;
    free_batch(r);
    if (done) {
        finish(r, RD_STORE_OK, NULL);
        return;
    }
    if (r->stalls >= STALLS_MAX) {
        finish(r, RD_STORE_ERROR, "redrive made no progress");
        return;
    }
    if (r->go_on && !r->go_on(r->arg)) {
        rd_info("redrive: %.*s stopped after %lld moved: the client has gone",
                (int)r->source_len, r->source, r->moved);
        finish(r, RD_STORE_UNAVAILABLE, NULL);
        return;
    }
    if (take(r) != 0) finish(r, RD_STORE_UNAVAILABLE, NULL);
}

static void on_forgotten(const rd_store_raw_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK)
        rd_debug("redrive: redrive_forget failed; its keys stay until the next redrive");
}

/* Step 4 for letters [from, to) (one target), fire and forget. */
static void forget(redrive_t *r, size_t from, size_t to)
{
    size_t argc = 1 + (to - from);
    const char **argv = rd_calloc(argc, sizeof *argv);
    size_t *lens = rd_calloc(argc, sizeof *lens);
    char (*num)[24] = rd_calloc(argc, sizeof *num);
    argv[0] = r->source;
    lens[0] = r->source_len;
    for (size_t i = from; i < to; i++) {
        size_t a = 1 + i - from;
        lens[a] = (size_t)snprintf(num[a], sizeof num[a], "%lld", r->letters[i].id);
        argv[a] = num[a];
    }
    rd_store_queue_t q = { r->letters[from].target, r->letters[from].target_len };
    rd_store_fcall(r->st, "redrive_forget", q, argc, argv, lens, on_forgotten, NULL);
    rd_free(num);
    rd_free(lens);
    rd_free(argv);
}

static void on_done(const rd_store_raw_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, &res->head)) return;
    long long left;
    if (!rd_reply_int(res->reply, &left)) {
        unexpected(r, "redrive_done");
        return;
    }
    for (size_t from = 0; from < r->count;) {
        size_t to = from + 1;
        while (to < r->count && r->letters[to].target_len == r->letters[from].target_len &&
               memcmp(r->letters[to].target, r->letters[from].target,
                      r->letters[from].target_len) == 0)
            to++;
        forget(r, from, to);
        from = to;
    }
    r->moved += (long long)r->count;
    advance(r, r->count > 0 || left > 0);
}

/* Step 3: every letter of the batch leaves the source. */
static void send_done(redrive_t *r)
{
    size_t argc = 2 * r->count;
    const char **argv = rd_calloc(argc, sizeof *argv);
    size_t *lens = rd_calloc(argc, sizeof *lens);
    char (*num)[24] = rd_calloc(argc, sizeof *num);
    for (size_t i = 0; i < r->count; i++) {
        lens[2 * i] = (size_t)snprintf(num[2 * i], sizeof num[0], "%lld", r->letters[i].id);
        lens[2 * i + 1] =
            (size_t)snprintf(num[2 * i + 1], sizeof num[0], "%lld", r->letters[i].new_id);
        argv[2 * i] = num[2 * i];
        argv[2 * i + 1] = num[2 * i + 1];
    }
    send_call(r, "redrive_done", source_q(r), argc, argv, lens, on_done);
    rd_free(num);
    rd_free(lens);
    rd_free(argv);
}

static void send_run(redrive_t *r);

static void on_in(const rd_store_raw_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, &res->head)) return;
    size_t n = r->run_end - r->run;
    if (rd_reply_type(res->reply) != RD_REPLY_ARRAY || rd_reply_len(res->reply) != n) {
        unexpected(r, "redrive_in");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!rd_reply_int(rd_reply_at(res->reply, i), &r->letters[r->run + i].new_id)) {
            unexpected(r, "redrive_in");
            return;
        }
    }
    r->run = r->run_end;
    if (r->run < r->count) send_run(r);
    else send_done(r);
}

/* Step 2 for the next run of letters with one target. */
static void send_run(redrive_t *r)
{
    letter_t *first = &r->letters[r->run];
    r->run_end = r->run + 1;
    while (r->run_end < r->count && r->letters[r->run_end].target_len == first->target_len &&
           memcmp(r->letters[r->run_end].target, first->target, first->target_len) == 0)
        r->run_end++;
    size_t k = r->run_end - r->run;
    size_t argc = 1 + 3 * k;
    const char **argv = rd_calloc(argc, sizeof *argv);
    size_t *lens = rd_calloc(argc, sizeof *lens);
    char (*num)[24] = rd_calloc(argc, sizeof *num);
    argv[0] = r->source;
    lens[0] = r->source_len;
    for (size_t i = 0; i < k; i++) {
        letter_t *l = &r->letters[r->run + i];
        size_t a = 1 + 3 * i;
        lens[a] = (size_t)snprintf(num[a], sizeof num[0], "%lld", l->id);
        argv[a] = num[a];
        lens[a + 1] = (size_t)snprintf(num[a + 1], sizeof num[0], "%lld", l->max_retries);
        argv[a + 1] = num[a + 1];
        argv[a + 2] = l->payload;
        lens[a + 2] = l->payload_len;
    }
    rd_store_queue_t q = { first->target, first->target_len };
    rd_store_register_queue(r->st, q);
    send_call(r, "redrive_in", q, argc, argv, lens, on_in);
    rd_free(num);
    rd_free(lens);
    rd_free(argv);
}

/* {resumed, next, {id, target, max_retries, payload}...} into r's batch. */
static bool parse_take(redrive_t *r, const rd_reply_t *reply)
{
    long long resumed;
    size_t next_len;
    if (rd_reply_type(reply) != RD_REPLY_ARRAY || rd_reply_len(reply) < 2 ||
        !rd_reply_int(rd_reply_at(reply, 0), &resumed))
        return false;
    const char *next = rd_reply_str(rd_reply_at(reply, 1), &next_len);
    if (next == NULL) return false;
    r->resumed = resumed == 1;
    r->next = rd_strndup(next, next_len);
    size_t count = rd_reply_len(reply) - 2;
    r->letters = rd_calloc(count ? count : 1, sizeof *r->letters);
    for (size_t i = 0; i < count; i++) {
        const rd_reply_t *e = rd_reply_at(reply, 2 + i);
        letter_t *l = &r->letters[i];
        const char *target, *payload;
        if (rd_reply_type(e) != RD_REPLY_ARRAY || rd_reply_len(e) != 4 ||
            !rd_reply_int(rd_reply_at(e, 0), &l->id) ||
            (target = rd_reply_str(rd_reply_at(e, 1), &l->target_len)) == NULL ||
            !rd_reply_int(rd_reply_at(e, 2), &l->max_retries) ||
            (payload = rd_reply_str(rd_reply_at(e, 3), &l->payload_len)) == NULL)
            return false;
        l->target = rd_strndup(target, l->target_len);
        l->payload = rd_malloc(l->payload_len + 1);
        memcpy(l->payload, payload, l->payload_len);
        l->payload[l->payload_len] = '\0';
        r->count = i + 1;
    }
    return true;
}

static void on_take(const rd_store_raw_t *res, void *arg)
{
    redrive_t *r = arg;
    if (failed(r, &res->head)) return;
    if (rd_reply_type(res->reply) == RD_REPLY_ARRAY && rd_reply_len(res->reply) == 1 &&
        rd_reply_is(rd_reply_at(res->reply, 0), "bad_cursor")) {
        finish(r, RD_STORE_BAD_CURSOR, NULL);
        return;
    }
    if (!parse_take(r, res->reply)) {
        unexpected(r, "redrive_take");
        return;
    }
    if (r->count == 0) {
        /* Nothing taken: a resumed take dropped orphans, a selection moved on. */
        advance(r, r->resumed);
        return;
    }
    r->run = 0;
    send_run(r);
}

/* Step 1: the leftovers of a cut call, else the next selection. Returns
 * -1 when it could not be sent. */
static int take(redrive_t *r)
{
    const char *argv[3 + TAKE_IDS_MAX];
    size_t lens[3 + TAKE_IDS_MAX];
    char num[TAKE_IDS_MAX][24];
    char limit[24];
    size_t argc = 0;
    argv[argc] = r->target;
    lens[argc++] = r->target_len;
    argv[argc] = r->mode;
    lens[argc++] = strlen(r->mode);
    if (strcmp(r->mode, "ids") == 0) {
        size_t k = r->n - r->offset < TAKE_IDS_MAX ? r->n - r->offset : TAKE_IDS_MAX;
        for (size_t i = 0; i < k; i++) {
            lens[argc] = (size_t)snprintf(num[i], sizeof num[i], "%lld", r->ids[r->offset + i]);
            argv[argc++] = num[i];
        }
        r->given = k;
    } else {
        lens[argc] = (size_t)snprintf(limit, sizeof limit, "%d", TAKE_LIMIT);
        argv[argc++] = limit;
        argv[argc] = r->cursor ? r->cursor : "";
        lens[argc] = strlen(argv[argc]);
        argc++;
        if (r->needle) {
            argv[argc] = r->needle;
            lens[argc++] = strlen(r->needle);
        }
    }
    return rd_store_fcall(r->st, "redrive_take", source_q(r), argc, argv, lens, on_take, r);
}

int rd_redrive_run(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                   const char *mode, const long long *ids, size_t n, const char *needle,
                   bool (*go_on)(void *arg), rd_store_replayed_cb cb, void *arg)
{
    if (!rd_store_ready(st)) return -1;
    redrive_t *r = rd_calloc(1, sizeof *r);
    r->st = st;
    r->source = rd_strndup(source.name, source.len);
    r->source_len = source.len;
    r->target = rd_strndup(target.name, target.len);
    r->target_len = target.len;
    r->mode = mode;
    r->needle = needle;
    r->ids = ids;
    r->n = n;
    r->go_on = go_on;
    r->cb = cb;
    r->arg = arg;
    if (take(r) == 0) return 0;
    rd_free(r->source);
    rd_free(r->target);
    rd_free(r);
    return -1;
}
