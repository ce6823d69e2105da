/* store_internal.h - the store's state, shared by store.c (the calls) and
 * store_settings.c (its making and settings). Private to the store: nothing
 * else includes it. */
#ifndef RETRYD_STORE_INTERNAL_H
#define RETRYD_STORE_INTERNAL_H

#include <stdbool.h>

#include "retryd/backend.h"
#include "retryd/buf.h"
#include "retryd/limits.h"
#include "retryd/shard_view.h"
#include "retryd/store.h"

enum { NONCE_MAX = RD_STORE_NONCE_MAX };

/* The most arguments of one call, FCALL and its name, key count and base
 * included: the longest, settle_claim's (store.c). */
enum { RD_STORE_ARGS_MAX = 4 + 3 + 6 * RD_SETTLE_BATCH_MAX + 5 };

struct rd_store {
    uv_loop_t *loop;
    rd_backend_t *redis;
    char *prefix;
    rd_buf_t registry_key;
    long long dead_ttl_ms, succeeded_ttl_ms;   /* passed on for timer hints */
    long long alert_recheck_ms;                /* > 0: ticks ask about alerts */
    bool alert_url;                            /* this instance runs with --alert-url */
    bool fleet_alert_url;                      /* timer_take: some instance does */
    bool series;                /* --series: ticks sample */
    char instance[17];          /* random hex: claim nonces are "<instance>.<seq>" */
    unsigned long long nonce_seq;
    /* The modules above that keep what calls leave behind (store.h "hooks"). */
    void (*before_write)(void *arg, rd_store_queue_t q, bool always);
    rd_store_written_fn written;
    void *write_arg;
    void (*claim_lost)(void *arg, rd_store_queue_t q, const char *nonce);
    void *lost_arg;
    void (*release_orphans)(void *arg, rd_store_queue_t q, size_t n, const rd_message_t *msgs);
    void *orphans_arg;
    rd_shard_views_t *views;    /* what this daemon knows of sharded queues (shard_view.h) */
};

/* The message move tasks' functions (lua/67_moves.lua; store_moves.c builds
 * their ARGV), each a row of store.c's table answering rd_store_strings_t. */
typedef enum rd_store_move_fn {
    RD_MOVE_FN_START, RD_MOVE_FN_CLAIM, RD_MOVE_FN_REPORT, RD_MOVE_FN_CANCEL, RD_MOVE_FN_LIST,
    RD_MOVE_FN_WATCH, RD_MOVE_FN_DUE,
} rd_store_move_fn_t;
enum { RD_MOVE_FN_ARGS_MAX = 8 };

/* Sends fn with KEYS[1] q's base (the registry for WATCH and DUE) and ARGV
 * argv[0..argc) (argc <= RD_MOVE_FN_ARGS_MAX); as every store call, -1
 * when it could not be sent (cb never runs). */
int rd_store_send_move(rd_store_t *st, rd_store_move_fn_t fn, rd_store_queue_t q, size_t argc,
                       const rd_str_t *argv, rd_store_strings_cb cb, void *arg);

/* A sharded queue's functions (lua/06_shards.lua) and the reads around them
 * (store_shards.c builds their ARGV), each a row answering
 * rd_store_strings_t: shards_set, policy_copy, shard_retire, policy_get's
 * pairs as they are, and FUNCTION LIST's library names. */
typedef enum rd_store_shards_fn {
    RD_SHARDS_FN_SET, RD_SHARDS_FN_COPY, RD_SHARDS_FN_RETIRE, RD_SHARDS_FN_SCAN, RD_SHARDS_FN_POLICY_PAIRS,
    RD_SHARDS_FN_LIBRARIES,
} rd_store_shards_fn_t;

/* Sends fn with KEYS[1] q's base (of q.shard; none for LIBRARIES) and ARGV
 * argv[0..argc) (borrowed until it returns); as every store call, -1 when it
 * could not be sent (cb never runs). */
int rd_store_send_shards(rd_store_t *st, rd_store_shards_fn_t fn, rd_store_queue_t q,
                         size_t argc, const rd_str_t *argv, rd_store_strings_cb cb, void *arg);

/* FUNCTION LIST's reply as the names of its libraries (store_shards.c). */
bool rd_store_parse_libraries(const rd_reply_t *r, const void *kept, void *res, long long *hint);

/* The rows whose ARGV other files build: enqueue's (lua/10_enqueue.lua,
 * store_enqueue.c) and the redrive's (lua/65_redrive.lua, store_redrive.c). */
typedef enum rd_store_row {
    RD_ROW_ENQUEUE, RD_ROW_ENQUEUE_MANY,
    RD_ROW_REDRIVE_TAKE, RD_ROW_REDRIVE_IN, RD_ROW_REDRIVE_DONE, RD_ROW_REDRIVE_FORGET,
} rd_store_row_t;

/* Sends row's function with KEYS[1] q's base and ARGV argv[0..argc) (borrowed
 * until it returns: the link copies them); kept goes to the row's parser
 * and is freed with kept_free after it (also when this fails). cb is the
 * row's callback type; as every store call, -1 when it could not be sent
 * (cb never runs). */
int rd_store_send_row(rd_store_t *st, rd_store_row_t row, rd_store_queue_t q, size_t argc,
                      const rd_str_t *argv, void *kept, void (*kept_free)(void *kept),
                      void (*cb)(void), void *arg);

#endif
