/* e2e_shards.h - what the e2e suites of sharded queues share
 * (docs/sharding.md): a daemon that takes shards, requests to it, a
 * shard's keys. Included after e2e_common.h. */
#ifndef RETRYD_E2E_SHARDS_H
#define RETRYD_E2E_SHARDS_H

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

/* Ends the raise of q as the timer round will once its scans are done
 * (docs/sharding.md "When the raise settles"; not built yet). */
static inline void close_raise(const char *q)
{
    redisReply *x = e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s} close %s", RD_FUNCTION("shards_set"),
                             g_prefix, q, shard_hget(q, 0, "shard", "rev"));
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_string_equal(x->element[0]->str, "ok");
    freeReplyObject(x);
}

#endif
