/* e2e_shards.h - what the e2e suites of sharded queues share
 * (docs/sharding.md): a daemon that takes shards, requests to it, a
 * shard's keys. Included after e2e_common.h. */
#ifndef RETRYD_E2E_SHARDS_H
#define RETRYD_E2E_SHARDS_H

#include "retryd/shards.h"

/* Deletes every retryd library but this release's: suites before this one
 * on the same redis-server load older ones (test_lua_upgrade), and a change
 * of shards is refused while one is loaded. */
static inline void drop_other_libraries(void)
{
    redisReply *x = e2e_rcmd(g_redis, "FUNCTION LIST LIBRARYNAME retryd*");
    for (size_t i = 0; x->type == REDIS_REPLY_ARRAY && i < x->elements; i++) {
        const redisReply *lib = x->element[i];
        for (size_t j = 0; j + 1 < lib->elements; j += 2)
            if (strcmp(lib->element[j]->str, "library_name") == 0 &&
                strcmp(lib->element[j + 1]->str, RD_LIBRARY_NAME) != 0)
                freeReplyObject(e2e_rcmd(g_redis, "FUNCTION DELETE %s", lib->element[j + 1]->str));
    }
    freeReplyObject(x);
}

/* The side daemon of the shards tests: --allow-shards yes, and no older
 * library loaded. */
static inline void start_sharding_daemon(void)
{
    drop_other_libraries();
    assert_int_equal(start_daemon(&g_side, g_redis_port, g_prefix, true, "--allow-shards", "yes",
                                  NULL), 0);
}

/* A request to the side daemon (g_side). */
static inline void side(e2e_response_t *r, const char *method, const char *path, const char *body)
{
    http_to(g_side.port, r, method, path, body, body ? strlen(body) : 0);
}

/* HGET of shard k's key "<prefix>:{<q>:<k>.0}:<suffix>" (k 0: the queue's
 * own), "" when absent. */
static inline const char *shard_hget(const char *q, int k, const char *suffix, const char *field)
{
    redisReply *x = k == 0 ? e2e_rcmd(g_redis, "HGET %s:{%s}:%s %s", g_prefix, q, suffix, field)
                           : e2e_rcmd(g_redis, "HGET %s:{%s:%d.0}:%s %s", g_prefix, q, k, suffix,
                                      field);
    static char out[8][128];
    static unsigned next;
    char *v = out[next++ % 8];
    snprintf(v, 128, "%s", x->type == REDIS_REPLY_STRING ? x->str : "");
    freeReplyObject(x);
    return v;
}

/* Waits (at most 5 s) until the raise of q has settled and every shard
 * has the closed layout's copy: the raise's first round closes a raise that
 * leaves no group on an old shard (src/shard_round.c), and its daemon's view
 * is the closed layout before any copy is sent. */
static inline void close_raise(const char *q)
{
    long long until = e2e_mono_ms() + 5000;
    for (;;) {
        bool settled = shard_hget(q, 0, "shard", "from")[0] == '\0';
        int n = atoi(shard_hget(q, 0, "policy", "shards"));
        const char *rev = shard_hget(q, 0, "shard", "rev");
        for (int k = 1; settled && k < n; k++)
            settled = strcmp(shard_hget(q, k, "shard", "rev"), rev) == 0;
        if (settled) return;
        if (e2e_mono_ms() > until) fail_msg("the raise of %s did not settle within 5 s", q);
        e2e_pause_ms(5);
    }
}

/* A group on shard 0 among `from` shards and on another among `to`
 * ("hold-<i>"), into out. */
static inline void group_leaving_shard_0(char *out, size_t cap, int from, int to)
{
    for (int i = 0;; i++) {
        snprintf(out, cap, "hold-%d", i);
        if (rd_shards_pick(out, strlen(out), from) == 0 && rd_shards_pick(out, strlen(out), to) != 0)
            return;
    }
}

/* Keeps the next raise of q (from `from` shards to `to`) from settling: a
 * scheduled message on shard 0 of a group that the raise places elsewhere
 * (a stray once raised). Returns its id: deleting it lets the raise settle. */
static inline long long hold_raise(const char *q, int from, int to)
{
    char g[32];
    group_leaving_shard_0(g, sizeof g, from, to);
    return enqueue(q, e2e_fmt("{\"payload\":\"hold\",\"group\":\"%s\",\"delay_seconds\":3600}", g));
}

#endif
