/* store_enqueue.c - the calls that create messages (lua/10_enqueue.lua):
 * enqueue and enqueue_many, whose ARGV one function builds per item, and
 * what each keeps for its parser (store_replies.c) to build the new message
 * from. Their rows are in store.c's table. */
#include "retryd/store.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/backend.h"
#include "retryd/limits.h"
#include "retryd/store_replies.h"

#include "store_internal.h"

enum { ITEM_ARGS = 12 };

/* One item's ARGV as the library reads it, and the storage its numbers and
 * flags are spelled in (it must live until the call is sent). */
typedef struct item_args {
    rd_str_t argv[ITEM_ARGS];
    char numbers[5][24];
    char flags[5];
} item_args_t;

static rd_str_t text(const char *s)
{
    return (rd_str_t){ s ? s : "", s ? strlen(s) : 0 };
}

static rd_str_t number(char buf[24], long long v)
{
    int n = snprintf(buf, 24, "%lld", v);
    return (rd_str_t){ buf, (size_t)n };
}

/* Whether in needs enqueue's ARGV[10..12] (attributes, window, flags). */
static bool needs_all(const rd_enqueue_t *in)
{
    return in->attributes != NULL || in->idempotency_window_ms > 0 || in->must_exist ||
           in->record_first_receive || in->content_dedup || in->only_present;
}

/* in's ARGV (enqueue's ARGV[1..12]) into a; returns how many: 12 with all,
 * else 9 unless one of ARGV[10..12] is used (the usual enqueue sends what
 * it always did). */
static size_t item_argv(const rd_enqueue_t *in, bool all, item_args_t *a)
{
    rd_str_t *v = a->argv;
    int max_retries = in->max_retries;
    v[0] = (rd_str_t){ in->payload, in->len };
    v[1] = number(a->numbers[0], max_retries > 0 ? max_retries : RD_MAX_RETRIES_DEFAULT);
    /* "": none given, the policy's delay_seconds (and message_ttl below) */
    v[2] = in->delay_ms >= 0 ? number(a->numbers[1], in->delay_ms) : text("");
    v[3] = text(in->idempotency_key);
    v[4] = text("1");   /* this caller forwards timer hints */
    v[5] = text(max_retries > 0 ? "request" : "default");
    v[6] = in->ttl_ms > 0 ? number(a->numbers[2], in->ttl_ms) : text("");
    v[7] = in->priority > 0 ? number(a->numbers[3], in->priority) : text("");
    v[8] = text(in->group);   /* NULL or "": none */
    if (!all && !needs_all(in)) return 9;
    v[9] = in->attributes ? (rd_str_t){ in->attributes, in->attributes_len } : text("");
    v[10] = number(a->numbers[4], in->idempotency_window_ms > 0 ? in->idempotency_window_ms : 0);
    size_t nf = 0;
    if (in->must_exist) a->flags[nf++] = 'e';
    if (in->record_first_receive) a->flags[nf++] = 'f';
    if (in->content_dedup) a->flags[nf++] = 'c';
    if (in->only_present) a->flags[nf++] = 'o';
    a->flags[nf] = '\0';
    v[11] = (rd_str_t){ a->flags, nf };
    return ITEM_ARGS;
}

/* What the parser needs of in: owned copies of its strings. */
static void keep_item(rd_store_enqueued_t *e, const rd_enqueue_t *in)
{
    bool grouped = in->group && in->group[0];
    e->payload = rd_strndup(in->payload, in->len);
    e->payload_len = in->len;
    e->idempotency_key = in->idempotency_key ? rd_strdup(in->idempotency_key) : NULL;
    e->max_retries = in->max_retries;
    e->delay_ms = in->delay_ms;
    e->priority = in->priority;
    e->group = grouped ? rd_strdup(in->group) : NULL;
    e->attributes = in->attributes ? rd_strndup(in->attributes, in->attributes_len) : NULL;
    e->attributes_len = in->attributes ? in->attributes_len : 0;
}

static void drop_item(rd_store_enqueued_t *e)
{
    rd_free(e->payload);
    rd_free(e->idempotency_key);
    rd_free(e->group);
    rd_free(e->attributes);
}

static void enqueued_free(void *kept)
{
    drop_item(kept);
    rd_free(kept);
}

static void enqueued_many_free(void *kept)
{
    rd_store_enqueued_many_kept_t *k = kept;
    for (size_t i = 0; i < k->n; i++) drop_item(&k->items[i]);
    rd_free(k->items);
    rd_free(k);
}

/* A write that wants its queue registered first (store.h "hooks"). */
static void before_write(rd_store_t *st, rd_store_queue_t q)
{
    if (st->before_write) st->before_write(st->write_arg, q, false);
}

int rd_store_enqueue(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *in,
                     rd_store_messages_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    before_write(st, q);
    item_args_t a = { 0 };
    /* A placement by a view of a sharded queue carries its rev (ARGV[13]). */
    rd_str_t argv[ITEM_ARGS + 1];
    char rev[24];
    size_t argc = item_argv(in, q.rev > 0, &a);
    memcpy(argv, a.argv, argc * sizeof *argv);
    if (q.rev > 0) argv[argc++] = number(rev, q.rev);
    rd_store_enqueued_t *e = rd_malloc(sizeof *e);
    keep_item(e, in);
    return rd_store_send_row(st, RD_ROW_ENQUEUE, q, argc, argv, e, enqueued_free,
                             (void (*)(void))cb, arg);
}

int rd_store_enqueue_many(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *items, size_t n,
                          rd_store_enqueued_many_cb cb, void *arg)
{
    if (n == 0 || n > RD_ENQUEUE_MANY_MAX) return -1;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += items[i].len + (items[i].attributes ? items[i].attributes_len : 0);
    if (n > 1 && bytes > RD_ENQUEUE_MANY_BYTES) return -1;
    if (!rd_backend_ready(st->redis)) return -1;
    before_write(st, q);
    /* ARGV[1] n, ARGV[2] each item's width: 9 (enqueue's ARGV[1..9]), or 12
     * when one of them uses ARGV[10..12]; then the items. Each argument
     * costs Redis about a thousand instructions to take in. */
    bool all = false;
    for (size_t i = 0; i < n && !all; i++) all = needs_all(&items[i]);
    size_t width = all ? ITEM_ARGS : 9;
    item_args_t *a = rd_calloc(n, sizeof *a);
    rd_str_t *argv = rd_malloc((3 + n * width) * sizeof *argv);
    char rev[24];
    char count[24], wide[24];
    argv[0] = number(count, (long long)n);
    argv[1] = number(wide, (long long)width);
    rd_store_enqueued_many_kept_t *k = rd_malloc(sizeof *k);
    k->n = n;
    k->items = rd_malloc(n * sizeof *k->items);
    for (size_t i = 0; i < n; i++) {
        item_argv(&items[i], all, &a[i]);
        memcpy(&argv[2 + i * width], a[i].argv, width * sizeof *argv);
        keep_item(&k->items[i], &items[i]);
    }
    size_t argc = 2 + n * width;
    if (q.rev > 0) argv[argc++] = number(rev, q.rev);   /* the view's rev, after the items */
    int rc = rd_store_send_row(st, RD_ROW_ENQUEUE_MANY, q, argc, argv, k,
                               enqueued_many_free, (void (*)(void))cb, arg);
    rd_free(argv);
    rd_free(a);
    return rc;
}
