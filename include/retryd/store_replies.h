/* store_replies.h - the parsers of the store's table (store.c): each turns
 * one row's reply into that row's typed result (store.h). Internal to the
 * store: only store.c and store_replies.c include it.
 *
 * Every parser has the row's signature: it fills res (zeroed, the row's
 * result type) from a reply that is not an error reply; kept is what the
 * row's argv builder kept for it (NULL: nothing); *hint is the call's timer
 * hint (-1 none, left alone by rows without one). False: a reply of
 * another shape. A parser may set res's head (an outcome other than OK).
 * Strings in res point into the reply. */
#ifndef RETRYD_STORE_REPLIES_H
#define RETRYD_STORE_REPLIES_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/redis.h"
#include "retryd/store.h"

/* What enqueue sent, to build the new message from {"ok", id, now}. */
typedef struct rd_store_enqueued {
    char *payload;              /* owned copies */
    size_t payload_len;
    char *idempotency_key;
    int max_retries;
    long long delay_ms;
    int priority;
    char *group;                /* NULL: none */
    char *attributes;           /* NULL: none */
    size_t attributes_len;
} rd_store_enqueued_t;

/* What enqueue_many sent: each item's, in order. */
typedef struct rd_store_enqueued_many_kept {
    size_t n;
    rd_store_enqueued_t *items;  /* n, owned */
} rd_store_enqueued_many_kept_t;

bool rd_store_parse_enqueue(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_enqueue_many(const rd_reply_t *r, const void *kept, void *res,
                                 long long *hint);
bool rd_store_parse_message(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_hinted(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_claim(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_settle_claim(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_succeed_many(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_released(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_replayed(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_outcome(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_list(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_stats(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_series(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_tick(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_policy(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_paused(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_alerts_take(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_count(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_strings(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_redrive_take(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_ids(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_timer_take(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_timer_done(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_page(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_groups(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_cleared(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_tags(const rd_reply_t *r, const void *kept, void *res, long long *hint);
bool rd_store_parse_pong(const rd_reply_t *r, const void *kept, void *res, long long *hint);

/* What a parser allocated in res (the row's free). */
void rd_result_free_messages(void *res);
void rd_result_free_enqueued_many(void *res);
void rd_result_free_list(void *res);
void rd_result_free_outcomes(void *res);
void rd_result_free_settled(void *res);
void rd_result_free_stats(void *res);
void rd_result_free_series(void *res);
void rd_result_free_page(void *res);
void rd_result_free_taken(void *res);
void rd_result_free_alerts_taken(void *res);
void rd_result_free_strings(void *res);
void rd_result_free_redrive_taken(void *res);
void rd_result_free_ids(void *res);
void rd_result_free_groups(void *res);

/* "integer 7", "array of 0", "string \"ok\"": what came, for the log. */
void rd_reply_describe(const rd_reply_t *r, char *out, size_t cap);

#endif
