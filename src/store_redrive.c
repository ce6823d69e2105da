/* store_redrive.c - the redrive's store calls (lua/65_redrive.lua; the four
 * steps are sequenced by src/redrive.c): their ARGV. The rows are in
 * store.c's table. */
#include "retryd/store.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"

#include "store_internal.h"

/* The most ARGV a call takes: every call's bound (the FCALL, its name, the
 * key count and the base are the other 4). */
enum { ARGS_MAX = RD_STORE_ARGS_MAX - 4 };

/* ARGV being built: strings borrowed from the caller, numbers in digits. */
typedef struct args {
    rd_str_t *v;
    char (*digits)[24];
    size_t n, ndigits;
} args_t;

static void args_init(args_t *a, size_t cap)
{
    a->v = rd_malloc((cap ? cap : 1) * sizeof *a->v);
    a->digits = rd_malloc((cap ? cap : 1) * sizeof *a->digits);
    a->n = a->ndigits = 0;
}

static void add_bytes(args_t *a, const char *p, size_t len)
{
    a->v[a->n++] = (rd_str_t){ p ? p : "", p ? len : 0 };
}

static void add_text(args_t *a, const char *s)
{
    add_bytes(a, s, s ? strlen(s) : 0);
}

static void add_int(args_t *a, long long v)
{
    char *d = a->digits[a->ndigits++];
    int len = snprintf(d, sizeof a->digits[0], "%lld", v);
    add_bytes(a, d, (size_t)len);
}

static int send_args(rd_store_t *st, rd_store_row_t row, rd_store_queue_t q, args_t *a,
                void (*cb)(void), void *arg)
{
    int rc = rd_store_send_row(st, row, q, a->n, a->v, NULL, NULL, cb, arg);
    rd_free(a->v);
    rd_free(a->digits);
    return rc;
}

int rd_store_redrive_take(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                          const char *mode, const long long *ids, size_t n, int limit,
                          const char *cursor, const char *needle,
                          rd_store_redrive_taken_cb cb, void *arg)
{
    bool by_id = strcmp(mode, "ids") == 0;
    if (by_id && n > RD_STORE_REPLAY_IDS_MAX) return -1;
    args_t a;
    args_init(&a, 2 + (by_id ? n : 3));
    add_bytes(&a, target.name, target.len);
    add_text(&a, mode);
    if (by_id) {
        for (size_t i = 0; i < n; i++) add_int(&a, ids[i]);
    } else {
        add_int(&a, limit);
        add_text(&a, cursor ? cursor : "");
        if (needle) add_text(&a, needle);
    }
    return send_args(st, RD_ROW_REDRIVE_TAKE, source, &a, (void (*)(void))cb, arg);
}

int rd_store_redrive_in(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                        size_t n, const rd_store_letter_t *letters, rd_store_ids_cb cb,
                        void *arg)
{
    if (1 + 5 * n > ARGS_MAX) return -1;
    if (st->before_write) st->before_write(st->write_arg, target, false);   /* store.h "hooks" */
    args_t a;
    args_init(&a, 1 + 5 * n);
    add_bytes(&a, source.name, source.len);
    for (size_t i = 0; i < n; i++) {
        add_int(&a, letters[i].id);
        add_int(&a, letters[i].max_retries);
        add_int(&a, letters[i].priority);
        add_bytes(&a, letters[i].history.ptr, letters[i].history.len);
        add_bytes(&a, letters[i].payload.ptr, letters[i].payload.len);
    }
    return send_args(st, RD_ROW_REDRIVE_IN, target, &a, (void (*)(void))cb, arg);
}

int rd_store_redrive_done(rd_store_t *st, rd_store_queue_t source, size_t n,
                          const long long *ids, const long long *new_ids, rd_store_count_cb cb,
                          void *arg)
{
    if (2 * n > ARGS_MAX) return -1;
    args_t a;
    args_init(&a, 2 * n);
    for (size_t i = 0; i < n; i++) {
        add_int(&a, ids[i]);
        add_int(&a, new_ids[i]);
    }
    return send_args(st, RD_ROW_REDRIVE_DONE, source, &a, (void (*)(void))cb, arg);
}

int rd_store_redrive_forget(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                            size_t n, const long long *ids, rd_store_count_cb cb, void *arg)
{
    if (1 + n > ARGS_MAX) return -1;
    args_t a;
    args_init(&a, 1 + n);
    add_bytes(&a, source.name, source.len);
    for (size_t i = 0; i < n; i++) add_int(&a, ids[i]);
    return send_args(st, RD_ROW_REDRIVE_FORGET, target, &a, (void (*)(void))cb, arg);
}
