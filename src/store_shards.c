/* store_shards.c - a sharded queue's store calls (lua/06_shards.lua,
 * docs/sharding.md): their ARGV, and FUNCTION LIST read as library names.
 * The rows are in store.c's table. */
#include "retryd/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/redis.h"

#include "store_internal.h"

static rd_str_t text(const char *s)
{
    return (rd_str_t){ s ? s : "", s ? strlen(s) : 0 };
}

int rd_store_shards_set(rd_store_t *st, rd_store_queue_t q, const char *mode, long long m,
                        const char *salts, rd_store_strings_cb cb, void *arg)
{
    char n[24];
    int len = snprintf(n, sizeof n, "%lld", m);
    rd_str_t argv[] = { text(mode), { n, (size_t)len }, text(salts) };
    q.shard = 0;
    return rd_store_send_shards(st, RD_SHARDS_FN_SET, q, salts ? 3 : 2, argv, cb, arg);
}

int rd_store_policy_pairs(rd_store_t *st, rd_store_queue_t q, rd_store_strings_cb cb, void *arg)
{
    return rd_store_send_shards(st, RD_SHARDS_FN_POLICY_PAIRS, q, 0, NULL, cb, arg);
}

int rd_store_policy_copy(rd_store_t *st, rd_store_queue_t q, const rd_str_t *pairs, size_t n,
                         rd_store_strings_cb cb, void *arg)
{
    const rd_str_t *rev = NULL;
    for (size_t i = 0; i + 1 < n; i += 2)
        if (pairs[i].ptr && pairs[i].len == 10 && memcmp(pairs[i].ptr, "layout.rev", 10) == 0)
            rev = &pairs[i + 1];
    if (rev == NULL || rev->ptr == NULL) return -1;   /* nothing to copy: no layout */
    rd_str_t *argv = rd_malloc((n + 1) * sizeof *argv);
    argv[0] = *rev;
    memcpy(argv + 1, pairs, n * sizeof *argv);
    int rc = rd_store_send_shards(st, RD_SHARDS_FN_COPY, q, n + 1, argv, cb, arg);
    rd_free(argv);
    return rc;
}

int rd_store_shard_retire(rd_store_t *st, rd_store_queue_t q, const char *mode, const char *rev,
                          rd_store_strings_cb cb, void *arg)
{
    rd_str_t argv[] = { text(mode), text(rev) };
    return rd_store_send_shards(st, RD_SHARDS_FN_RETIRE, q, rev ? 2 : 1, argv, cb, arg);
}

int rd_store_shard_scan(rd_store_t *st, rd_store_queue_t q, const char *rev,
                        rd_store_strings_cb cb, void *arg)
{
    rd_str_t argv[] = { text(rev) };
    return rd_store_send_shards(st, RD_SHARDS_FN_SCAN, q, 1, argv, cb, arg);
}

int rd_store_libraries(rd_store_t *st, rd_store_strings_cb cb, void *arg)
{
    rd_str_t argv[] = { text("LIST"), text("LIBRARYNAME"), text("retryd*") };
    rd_store_queue_t none = { .name = NULL, .len = 0 };
    return rd_store_send_shards(st, RD_SHARDS_FN_LIBRARIES, none, 3, argv, cb, arg);
}

/* FUNCTION LIST: one array per library, alternating field names and values;
 * the value after "library_name" of each. */
bool rd_store_parse_libraries(const rd_reply_t *r, const void *kept, void *res, long long *hint)
{
    (void)kept, (void)hint;
    rd_store_strings_t *s = res;
    if (rd_reply_type(r) != RD_REPLY_ARRAY) return false;
    size_t n = rd_reply_len(r);
    s->strings = rd_calloc(n ? n : 1, sizeof *s->strings);
    for (size_t i = 0; i < n; i++) {
        const rd_reply_t *lib = rd_reply_at(r, i);
        if (rd_reply_type(lib) != RD_REPLY_ARRAY) return false;
        for (size_t j = 0; j + 1 < rd_reply_len(lib); j += 2) {
            if (!rd_reply_is(rd_reply_at(lib, j), "library_name")) continue;
            rd_str_t *out = &s->strings[s->count];
            out->ptr = rd_reply_str(rd_reply_at(lib, j + 1), &out->len);
            if (out->ptr == NULL) return false;
            s->count++;
            break;
        }
    }
    return true;
}

/* rd_store_learn_view and rd_store_read_view: one policy_get of shard 0,
 * its layout into the views; the caller's callback, if any, after. */
typedef struct learning {
    rd_store_t *st;
    char *name;
    size_t len;
    rd_store_status_cb cb;
    void *arg;
} learning_t;

static void on_view_read(const rd_store_strings_t *res, void *arg)
{
    learning_t *g = arg;
    rd_store_queue_t q = { .name = g->name, .len = g->len };
    if (res->head.status == RD_STORE_OK)
        rd_shard_views_learn(g->st->views, q, res->strings, res->count, uv_now(g->st->loop));
    else
        rd_shard_views_refresh_failed(g->st->views, q);
    if (g->cb) g->cb(&res->head, g->arg);
    rd_free(g->name);
    rd_free(g);
}

static int learn(rd_store_t *st, rd_store_queue_t q, rd_store_status_cb cb, void *arg)
{
    learning_t *g = rd_malloc(sizeof *g);
    *g = (learning_t){ .st = st, .name = rd_strndup(q.name, q.len), .len = q.len, .cb = cb,
                       .arg = arg };
    q = (rd_store_queue_t){ .name = g->name, .len = g->len };
    if (rd_store_policy_pairs(st, q, on_view_read, g) != 0) {
        rd_shard_views_refresh_failed(st->views, q);
        rd_free(g->name);
        rd_free(g);
        return -1;
    }
    return 0;
}

void rd_store_learn_view(rd_store_t *st, rd_store_queue_t q)
{
    if (rd_shard_views_find(st->views, q, uv_now(st->loop))) return;
    (void)learn(st, q, NULL, NULL);
}

void rd_store_relearn_view(rd_store_t *st, rd_store_queue_t q)
{
    (void)learn(st, q, NULL, NULL);
}

int rd_store_read_view(rd_store_t *st, rd_store_queue_t q, rd_store_status_cb cb, void *arg)
{
    return learn(st, q, cb, arg);
}

rd_shard_view_t *rd_store_view(rd_store_t *st, rd_store_queue_t q)
{
    if (st == NULL) return NULL;
    uint64_t now = uv_now(st->loop);
    rd_shard_view_t *v = rd_shard_views_find(st->views, q, now);
    if (v && rd_shard_views_refresh_due(st->views, q, now)) (void)learn(st, q, NULL, NULL);
    return v;
}
