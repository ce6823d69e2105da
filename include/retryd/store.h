/* store.h - queue operations: each one is one FCALL of the retryd library.
 * store.c builds KEYS/ARGV and turns replies into results; it holds no state
 * of a message, so any number of retryd processes can share one Redis.
 *
 * Async rule: an operation returns 0 and later calls its callback exactly once
 * from the loop, or returns -1 (Redis not ready) and never calls it. The
 * result and everything it points to are valid only inside the callback.
 *
 * Timer hints and the registry (docs/design.md "Timers and the registry"):
 * the calls that create timer work (a delayed enqueue, a claim, a fail, a
 * succeed, a kill) may answer a hint, which the store hands to its write
 * hooks before it runs the callback; src/registry.c forwards it to the
 * timer schedule with `register`. An enqueue (policy_set, pause,
 * redrive_in) asks the hooks first, so that its queue is registered. A
 * claim whose answer is lost goes to the lost-claim hook (src/lost_claims.c).
 *
 * Each operation is one row of the table in store.c (docs/design.md "How to
 * add a library function"). */
#ifndef RETRYD_STORE_H
#define RETRYD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "retryd/message.h"
#include "retryd/backend.h"
#include "retryd/metrics.h"
#include "retryd/policy.h"
#include "retryd/redis.h"
#include "retryd/stats.h"

typedef struct rd_store rd_store_t;

typedef enum rd_store_status {
    RD_STORE_OK,
    RD_STORE_DUPLICATE,       /* enqueue: idempotency key seen; messages[0] is the original
                                 (status RD_STATUS_UNKNOWN when it was deleted since) */
    RD_STORE_NOT_FOUND,
    RD_STORE_INVALID_STATE,   /* state holds the message's current status */
    RD_STORE_LEASE_MISMATCH,
    RD_STORE_BAD_CURSOR,
    RD_STORE_LOST,            /* a write was sent, then the link dropped: outcome unknown */
    RD_STORE_UNAVAILABLE,     /* not done: not sent after all (cluster redirects ran out),
                                 or a read whose link dropped (a read has no outcome) */
    RD_STORE_ERROR,           /* Redis answered something we did not expect; see detail */
    RD_STORE_TOO_LARGE,       /* enqueue: the payload is longer than the queue policy's
                                 max_payload_bytes (rd_store_messages_t.payload_limit) */
    /* A placement on a sharded queue that did not go through, nothing
     * written (docs/sharding.md "Where shards is read"; src/enqueue_lines.c
     * and src/enqueue_chunks.c act on them, no answer shows them): */
    RD_STORE_RESHARD,         /* the caller's view is older than the shard's layout, or
                                 the shard is retired or outside the count */
    RD_STORE_COPY,            /* the shard's copy of the policy is older than the view */
    RD_STORE_MOVED,           /* only_present, and the group or key is not on this shard */
    RD_STORE_FULL,            /* the shard handed out all its ids */
} rd_store_status_t;

/* Every result starts with this head: how the operation went. Each
 * operation has its own result type (below), which holds only what that
 * operation answers, and its own callback type. */
typedef struct rd_store_head {
    rd_store_status_t status;
    rd_str_t detail;          /* RD_STORE_ERROR: the error text */
    rd_str_t state;           /* RD_STORE_INVALID_STATE */
} rd_store_head_t;

/* enqueue, claim, succeed, fail, extend, replay, get, kill. */
typedef struct rd_store_messages {
    rd_store_head_t head;
    rd_message_t *messages;
    size_t count;
    long long retry_ms;       /* claim: when the queue's rate limit held it back, the ms
                                 until its next token is due; else 0 */
    /* claim, only when it leased nothing (else -1 and true): the queue
     * policy's wait_seconds in ms (-1: not set), and whether the queue is
     * known (it has a policy, or it ever had a message). */
    long long policy_wait_ms;
    bool queue_known;
    bool sharded;             /* an empty claim: the queue is sharded, other shards may
                                 hold its work (docs/sharding.md) */
    long long payload_limit;  /* enqueue, RD_STORE_TOO_LARGE: max_payload_bytes */
} rd_store_messages_t;

/* enqueue_many: each item's outcome, in order, as rd_store_enqueue answers
 * it (status OK, DUPLICATE, NOT_FOUND, INVALID_STATE or TOO_LARGE in the
 * item's head). head is the call's: any other status than OK means no
 * item's outcome is known (count 0). */
typedef struct rd_store_enqueued_many {
    rd_store_head_t head;
    rd_store_messages_t *items;
    size_t count;             /* items done: n, or fewer when the originals of their
                                 duplicates would pass the library's reply bytes
                                 (REPLY_BYTES): items count..n-1 were not done, nothing
                                 of them written; send them again */
    bool first;               /* an item got id 1 */
} rd_store_enqueued_many_t;

/* list. */
typedef struct rd_store_list {
    rd_store_head_t head;
    rd_message_t *messages;
    size_t count;
    long long total;
    rd_str_t next_cursor;     /* len 0 at the end */
} rd_store_list_t;

/* succeed_many: one code per item. */
typedef struct rd_store_outcomes {
    rd_store_head_t head;
    rd_str_t *outcomes;
    size_t count;
} rd_store_outcomes_t;

/* settle_claim: one code per settlement, then the claimed messages. */
typedef struct rd_store_settled {
    rd_store_head_t head;
    rd_str_t *outcomes;
    size_t settled;
    rd_message_t *messages;
    size_t count;
    long long policy_wait_ms; /* as rd_store_messages_t's: when its claim leased nothing */
    bool queue_known;
    bool sharded;             /* an empty claim: the queue is sharded, other shards may
                                 hold its work (docs/sharding.md) */
} rd_store_settled_t;

/* release. */
typedef struct rd_store_released {
    rd_store_head_t head;
    long long released;
} rd_store_released_t;

/* replay_many; rd_replay_all (replay.h) too, with the total replayed. */
typedef struct rd_store_replayed {
    rd_store_head_t head;
    long long replayed;
    rd_str_t next_cursor;     /* len 0 at the end */
} rd_store_replayed_t;

/* stats. */
typedef struct rd_store_stats_result {
    rd_store_head_t head;
    rd_queue_stats_t stats;
} rd_store_stats_result_t;

/* series: one resolution of a queue's time series (docs/series.md). */
enum { RD_SERIES_COUNT = 5 };   /* enqueued, succeeded, failed, dead, replayed */
typedef struct rd_store_series {
    rd_store_head_t head;
    long long start_ms;       /* start of the oldest bucket */
    long long step_ms;        /* 60000 or 3600000 */
    size_t len;               /* buckets per series */
    long long *values;        /* RD_SERIES_COUNT * len: series i's bucket j at [i * len + j] */
} rd_store_series_t;

/* tick. */
typedef struct rd_store_tick {
    rd_store_head_t head;
    long long promoted, reclaimed, expired, next_in_ms, ready;
    bool empty;               /* none of the queue's keys is left */
    int alerts;               /* alerts to deliver: 0 none, 1 for an --alert-url instance,
                                 2 to the queue's own alert_url (any instance) */
    bool alerts_checked;      /* the tick looked (rd_store_set_alerts set a recheck) */
    long long moving;         /* letters waiting in redriving: deaths moving to the
                                 dead_letter_queue, or a redrive cut short */
    long long shards;         /* the queue's shards (1 unless sharded: its caller ticks
                                 each, docs/sharding.md) */
} rd_store_tick_t;

/* queues_page. */
typedef struct rd_store_page {
    rd_store_head_t head;
    rd_str_t *names;
    size_t count;
    long long total;
    rd_str_t next_cursor;     /* len 0 at the end */
} rd_store_page_t;

/* groups: one page of a queue's fairness groups (docs/reference.md
 * "Fairness groups"). */
typedef struct rd_store_group {
    rd_str_t name;            /* the group's bytes */
    long long pending, processing;
} rd_store_group_t;

typedef struct rd_store_groups {
    rd_store_head_t head;
    rd_store_group_t *groups;
    size_t count;
    rd_str_t next_cursor;     /* the last name of the page; len 0 at the end */
} rd_store_groups_t;

/* timer_take. */
typedef struct rd_store_taken {
    rd_store_head_t head;
    long long token;          /* the round's token (0: nothing was due) */
    long long next_in_ms;
    rd_str_t *names;
    size_t count;
    bool fleet_alert_url;     /* an instance with --alert-url took a round in the last day */
    rd_str_t *alert_names;    /* queues with alerts handed to this --alert-url instance */
    size_t alert_count;
} rd_store_taken_t;

/* timer_done. */
typedef struct rd_store_done {
    rd_store_head_t head;
    long long left;           /* how many queues left the registry */
} rd_store_done_t;

/* policy_get, policy_set, pause: the queue's policy as stored now. */
typedef struct rd_store_policy {
    rd_store_head_t head;
    rd_policy_t policy;
    bool created;             /* rd_store_policy_create: it wrote the policy (else the
                                 queue had one, answered unchanged) */
} rd_store_policy_t;

/* One number: register, alerts_ack, redrive_done, redrive_forget. */
typedef struct rd_store_count {
    rd_store_head_t head;
    long long n;
} rd_store_count_t;

/* drop_queue, purge_all: one bounded batch (lua/46_drop.lua). */
typedef enum rd_clear_state {
    RD_CLEAR_MORE,            /* call again */
    RD_CLEAR_UNREGISTER,      /* drop_queue: nothing left but the mark; forget, then call
                                 again with unregistered */
    RD_CLEAR_DONE,
} rd_clear_state_t;
typedef struct rd_store_cleared {
    rd_store_head_t head;
    rd_clear_state_t state;
    long long deleted;        /* records this call deleted (rd_queue_clear: in all) */
} rd_store_cleared_t;

/* A flat array of strings (alerts_touch, CONFIG GET, tags_get, dlq_sources):
 * strings[i].ptr is NULL for an element that is not a string. */
typedef struct rd_store_strings {
    rd_store_head_t head;
    rd_str_t *strings;
    size_t count;
} rd_store_strings_t;

/* alerts_take: one death of the queue's events stream (docs/dead-letters.md
 * "Delivery protocol"). A field the entry lacks is as the library sent it:
 * stream_id.ptr NULL for none, numbers 0 when not a number. */
typedef struct rd_store_alert {
    rd_str_t stream_id;
    long long id;
    rd_str_t error;
    long long retry_count;
    long long at_ms;
} rd_store_alert_t;

typedef struct rd_store_alerts_taken {
    rd_store_head_t head;
    long long more;           /* 1: more may be waiting, take again */
    rd_str_t url;             /* the queue's policy alert_url, len 0 when not set */
    rd_store_alert_t *alerts;
    size_t count;
} rd_store_alerts_taken_t;

/* redrive_take: a letter taken into the redriving state. */
typedef struct rd_store_letter {
    long long id;
    rd_str_t target;          /* the queue it is redriven to */
    long long max_retries;    /* 0: a death's move, the target gives its own budget */
    rd_str_t payload;
    long long priority;       /* 0-9 */
    rd_str_t history;         /* opaque: the packed history, or empty (lua/65_redrive.lua) */
} rd_store_letter_t;

typedef struct rd_store_redrive_taken {
    rd_store_head_t head;     /* RD_STORE_BAD_CURSOR for a cursor the library refused */
    bool resumed;             /* the letters a cut redrive left, not a new selection */
    rd_str_t next;            /* where the next take starts ("" done; ids: how many used) */
    rd_store_letter_t *letters;
    size_t count;
} rd_store_redrive_taken_t;

/* redrive_in: the id each letter has in the target, in order. */
typedef struct rd_store_ids {
    rd_store_head_t head;
    long long *ids;
    size_t count;
} rd_store_ids_t;

/* delete and ping answer the head alone. */
typedef void (*rd_store_status_cb)(const rd_store_head_t *res, void *arg);
typedef void (*rd_store_messages_cb)(const rd_store_messages_t *res, void *arg);
typedef void (*rd_store_enqueued_many_cb)(const rd_store_enqueued_many_t *res, void *arg);
typedef void (*rd_store_list_cb)(const rd_store_list_t *res, void *arg);
typedef void (*rd_store_outcomes_cb)(const rd_store_outcomes_t *res, void *arg);
typedef void (*rd_store_settled_cb)(const rd_store_settled_t *res, void *arg);
typedef void (*rd_store_released_cb)(const rd_store_released_t *res, void *arg);
typedef void (*rd_store_replayed_cb)(const rd_store_replayed_t *res, void *arg);
typedef void (*rd_store_stats_cb)(const rd_store_stats_result_t *res, void *arg);
typedef void (*rd_store_tick_cb)(const rd_store_tick_t *res, void *arg);
typedef void (*rd_store_series_cb)(const rd_store_series_t *res, void *arg);
typedef void (*rd_store_page_cb)(const rd_store_page_t *res, void *arg);
typedef void (*rd_store_taken_cb)(const rd_store_taken_t *res, void *arg);
typedef void (*rd_store_groups_cb)(const rd_store_groups_t *res, void *arg);
typedef void (*rd_store_done_cb)(const rd_store_done_t *res, void *arg);
typedef void (*rd_store_policy_cb)(const rd_store_policy_t *res, void *arg);
typedef void (*rd_store_count_cb)(const rd_store_count_t *res, void *arg);
typedef void (*rd_store_strings_cb)(const rd_store_strings_t *res, void *arg);
typedef void (*rd_store_cleared_cb)(const rd_store_cleared_t *res, void *arg);
typedef void (*rd_store_alerts_taken_cb)(const rd_store_alerts_taken_t *res, void *arg);
typedef void (*rd_store_redrive_taken_cb)(const rd_store_redrive_taken_t *res, void *arg);
typedef void (*rd_store_ids_cb)(const rd_store_ids_t *res, void *arg);

/* A queue, and which of its shards (docs/sharding.md) a call goes to. An
 * operation on one message (get, succeed, fail, snooze, extend, replay,
 * delete, kill) goes to its id's shard (rd_shards_of_id), whatever shard
 * says; every other goes to shard. { name, len } alone is shard 0, the
 * queue of an unsharded queue. */
typedef struct rd_store_queue {
    const char *name;         /* decoded queue name (bytes) */
    size_t len;
    int shard;                /* 0..RD_SHARDS_MAX-1 */
    const uint16_t *salts;    /* salts[k-1]: shard k's salt, k 1..nsalts (the
                               * layout's, docs/sharding.md "Where each key
                               * goes"); a shard past them, or salts NULL: 0 */
    int nsalts;
    long long rev;            /* the layout's rev of the caller's view, sent with a
                               * placement (enqueue, enqueue_many); 0: no view */
} rd_store_queue_t;

/* Borrows backend; prefix is copied. */
rd_store_t *rd_store_new(uv_loop_t *loop, rd_backend_t *backend, const char *prefix);
void rd_store_free(rd_store_t *st);
/* The retention the finishing calls pass on for their timer hints (0: none;
 * the default until set). */
void rd_store_set_retention(rd_store_t *st, long long dead_ttl_ms, long long succeeded_ttl_ms);
/* recheck_ms > 0: every tick asks whether the queue has alerts to deliver
 * (rd_store_tick_t.alerts; a queue without an alert destination costs no
 * command), keeping such a queue due again within recheck_ms; 0: not asked.
 * alert_url: this instance runs with --alert-url (its rounds say so to
 * timer_take, which hands it the queues other instances found alerts in;
 * docs/dead-letters.md "Alert webhooks"). */
void rd_store_set_alerts(rd_store_t *st, long long recheck_ms, bool alert_url);
/* What the last timer_take said: an instance with --alert-url runs in the
 * fleet, so ticks look for alerts of queues without their own alert_url. */
void rd_store_set_fleet_alert_url(rd_store_t *st, bool on);

/* What this daemon knows of sharded queues' layouts (shard_view.h): the
 * faces' placements read and teach it. */
typedef struct rd_shard_views rd_shard_views_t;
rd_shard_views_t *rd_store_views(rd_store_t *st);   /* st NULL: NULL */
/* The loop's clock (ms), as the views' idle time counts it (st NULL: 0). */
uint64_t rd_store_now_ms(const rd_store_t *st);

/* True while operations can be sent (the Redis link is READY). */
bool rd_store_ready(const rd_store_t *st);
/* True once every link has had its first connect attempt (rd_backend_started). */
bool rd_store_started(const rd_store_t *st);
/* Round-trip times of this store's Redis commands. */
const rd_histogram_t *rd_store_rtt(const rd_store_t *st);

/* Leases and retries the request did not give (docs/flow-control.md
 * "Precedence"): an enqueue's max_retries 0 means "none given" (the policy's,
 * else 3); a lease not given is the daemon's default (its ms), which the
 * queue's policy overrides. The function decides, in the call. */
typedef struct rd_lease {
    long long ms;             /* the request's lease, or the daemon's default */
    bool given;               /* false: the request gave none (the policy's wins) */
} rd_lease_t;

/* What an enqueue sends (lua/10_enqueue.lua's ARGV). Every string is
 * borrowed until rd_store_enqueue returns (the store copies what it keeps). */
typedef struct rd_enqueue {
    const char *payload;
    size_t len;
    int max_retries;                /* 0: none given (the policy's, else 3) */
    long long delay_ms;             /* -1: none given (the policy's delay_seconds, else 0) */
    long long ttl_ms;               /* -1: none given (the policy's message_ttl applies) */
    int priority;                   /* 0-9 (docs/reference.md "Priority") */
    const char *group;              /* NULL or "" for none, else 1-RD_GROUP_MAX bytes
                                       (docs/reference.md "Fairness groups") */
    const char *idempotency_key;    /* NULL for none */
    long long idempotency_window_ms;  /* how long the key dedups; 0: 24 h */
    const char *attributes;         /* opaque bytes kept with the message (NULL: none), */
    size_t attributes_len;          /* at most RD_ATTRIBUTES_MAX */
    bool must_exist;                /* the queue must exist (a policy or a message ever, no
                                       drop running): else RD_STORE_NOT_FOUND, nothing made */
    bool record_first_receive;      /* its first claim keeps first_received_at_ms */
    bool content_dedup;             /* idempotency_key is the payload's hash: refused with
                                       RD_STORE_INVALID_STATE ("no_content_dedup"), nothing
                                       made, unless the policy has content_based_dedup */
    bool only_present;              /* placed only if its group has messages on the shard,
                                       or its key is live there: else RD_STORE_MOVED */
} rd_enqueue_t;

/* res: the message as stored (not read back), or the original with
 * RD_STORE_DUPLICATE, or RD_STORE_NOT_FOUND (must_exist), or
 * RD_STORE_INVALID_STATE (content_dedup on a queue without it), or
 * RD_STORE_TOO_LARGE (res->payload_limit: the policy's max_payload_bytes;
 * nothing created). */
int rd_store_enqueue(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *e,
                     rd_store_messages_cb cb, void *arg);
/* items[0..n) in one enqueue_many call (lua/10_enqueue.lua; src/store_enqueue.c),
 * in order, each as rd_store_enqueue would: res->items[i] is item i's result.
 * n is 1..RD_ENQUEUE_MANY_MAX, and two items or more carry at most
 * RD_ENQUEUE_MANY_BYTES of payloads and attributes (-1 otherwise, or when
 * Redis is not ready; cb never runs). A caller with more splits them
 * (src/enqueue_chunks.c does, and sends again what a short answer left).
 * Every string is borrowed until it returns, as rd_store_enqueue's. */
int rd_store_enqueue_many(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *items, size_t n,
                          rd_store_enqueued_many_cb cb, void *arg);
/* Up to count messages; fewer when they would pass the library's REPLY_BYTES
 * (at least one when any is claimable), or when the queue's policy holds
 * them back (pause, max_in_flight, rate_limit: res->retry_ms). worker: NULL,
 * or 1-128 bytes kept with each lease (docs/reference.md "History"). */
int rd_store_claim(rd_store_t *st, rd_store_queue_t q, rd_lease_t lease, int count,
                   const char *worker, rd_store_messages_cb cb, void *arg);
/* token NULL: accept any current lease. */
int rd_store_succeed(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                     rd_store_messages_cb cb, void *arg);
/* retry_after_ms < 0: the backoff table decides. */
int rd_store_fail(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                  const char *error, bool retryable, long long retry_after_ms,
                  rd_store_messages_cb cb, void *arg);
/* Puts a processing message off (docs/reference.md "Snooze"): pending again,
 * due in delay_ms (0..RD_DELAY_SECONDS_MAX * 1000), no attempt counted; token
 * NULL: accept any current lease. res: the message, as succeed's. */
int rd_store_snooze(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    long long delay_ms, rd_store_messages_cb cb, void *arg);
int rd_store_extend(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    rd_lease_t lease, rd_store_messages_cb cb, void *arg);
int rd_store_replay(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb,
                    void *arg);
int rd_store_get(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb, void *arg);
/* status NULL lists every state; cursor NULL starts at the beginning.
 * error_contains NULL/"" and since_ms/until_ms < 0 mean no filter. A page
 * may hold fewer than limit (bytes, work budget) with a next_cursor. */
int rd_store_list(rd_store_t *st, rd_store_queue_t q, const char *status, int limit,
                  const char *cursor, const char *error_contains, long long since_ms,
                  long long until_ms, rd_store_list_cb cb, void *arg);
/* Batch acknowledgement: ids[i] with tokens[i] (NULL: any lease), n in 1..100.
 * res->outcomes[i] is "succeeded", "not_found", "invalid_state" or "lease_mismatch". */
int rd_store_succeed_many(rd_store_t *st, rd_store_queue_t q, size_t n, const long long *ids,
                          const char *const *tokens, rd_store_outcomes_cb cb, void *arg);
/* Settle and claim in one call (docs/reference.md "Settle and claim"): applies items[0..n) (n 0..100) as
 * succeed, fail and snooze would, in order, then claims up to count (0..100) as
 * rd_store_claim does (count 0: settle only). res->outcomes[i] (res->settled of them) is the new
 * state of item i ("succeeded", "pending", "dead") or why nothing was done
 * ("not_found", "invalid_state", "lease_mismatch"); res->messages the claimed
 * ones. The items are read only during the call. */
int rd_store_settle_claim(rd_store_t *st, rd_store_queue_t q, rd_lease_t lease, int count,
                          const char *worker, size_t n, const rd_settlement_t *items, rd_store_settled_cb cb, void *arg);
/* Releases claimed messages (pending again, no failure counted); res->released. */
int rd_store_release(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs,
                     rd_store_released_cb cb, void *arg);
/* rd_store_release for messages claimed for a client that is gone (a
 * departed long-poll, a claim whose answer could not be delivered), with no
 * one to answer: only each message's id and lease_token are read, and only
 * during the call. A call that gets no answer (the link dropped, or it could
 * not be sent) is sent again until Redis answers it, by the orphans hook
 * (rd_store_set_orphans_hook; at most 1,024 kept, docs/durability.md); one
 * that Redis answers with an error is logged, and those leases expire. */
void rd_store_release_orphans(rd_store_t *st, rd_store_queue_t q, size_t n,
                              const rd_message_t *msgs);
/* 50 letters a call: a replay rewrites the record, moves the id and counts
 * and records the event, about 90 µs per letter (test_ops
 * test_bulk_replay_and_claim_latency holds every call under 10 ms). */
enum { RD_STORE_REPLAY_IDS_MAX = 50 };

/* Batch replay of dead letters, one bounded call: mode "ids" (ids, n <= 50),
 * "all" or "error" (needle) with limit and cursor (NULL first). The result has
 * replayed and next_cursor: call again until next_cursor is empty. */
int rd_store_replay_many(rd_store_t *st, rd_store_queue_t q, const char *mode,
                         const long long *ids, size_t n, int limit, const char *cursor,
                         const char *needle, rd_store_replayed_cb cb, void *arg);


/* ---- alerts (src/alerts.c; lua/05_alerts.lua) ---- */

/* Takes up to count (1..100) deaths of q's events stream for consumer:
 * entries pending longer than min_idle_ms with another consumer first, then
 * new ones. alert_url: this instance has --alert-url (without it, a queue
 * without its own alert_url answers nothing). */
int rd_store_alerts_take(rd_store_t *st, rd_store_queue_t q, const char *consumer, int count,
                         long long min_idle_ms, bool alert_url, rd_store_alerts_taken_cb cb,
                         void *arg);
/* Acknowledges the stream entries sids[0..n) (1..100); res->n of them. */
int rd_store_alerts_ack(rd_store_t *st, rd_store_queue_t q, size_t n, const char *const *sids,
                        rd_store_count_cb cb, void *arg);
/* Claims sids[0..n) (0..1000) again for consumer and counts failures failed
 * POSTs; res->strings are the entries the consumer still holds. */
int rd_store_alerts_touch(rd_store_t *st, rd_store_queue_t q, const char *consumer,
                          long long failures, size_t n, const char *const *sids,
                          rd_store_strings_cb cb, void *arg);

/* ---- redrive (src/redrive.c; lua/65_redrive.lua) ---- */

/* Step 1 on the source: the letters a cut redrive left, else the next
 * selection: mode "ids" (ids[0..n), n <= RD_STORE_REPLAY_IDS_MAX), or "all" /
 * "error" (needle) from cursor (NULL first) with limit. */
int rd_store_redrive_take(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t target,
                          const char *mode, const long long *ids, size_t n, int limit,
                          const char *cursor, const char *needle,
                          rd_store_redrive_taken_cb cb, void *arg);
/* Step 2 on the target: letters[0..n) (one target, n <= RD_STORE_REPLAY_IDS_MAX)
 * enqueued once per source letter; res->ids their ids in target. */
int rd_store_redrive_in(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                        size_t n, const rd_store_letter_t *letters, rd_store_ids_cb cb,
                        void *arg);
/* Step 3 on the source: letter ids[i] became new_ids[i] (n <= RD_STORE_REPLAY_IDS_MAX);
 * res->n is how many were still redriving. */
int rd_store_redrive_done(rd_store_t *st, rd_store_queue_t source, size_t n,
                          const long long *ids, const long long *new_ids, rd_store_count_cb cb,
                          void *arg);
/* Step 4 on the target: the idempotency keys of source's ids[0..n) expire a
 * day later. */
int rd_store_redrive_forget(rd_store_t *st, rd_store_queue_t target, rd_store_queue_t source,
                            size_t n, const long long *ids, rd_store_count_cb cb, void *arg);

/* Any state but processing (RD_STORE_INVALID_STATE then). */
int rd_store_delete(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_status_cb cb,
                    void *arg);
/* Marks a pending or processing message dead; reason NULL for the default. */
int rd_store_kill(rd_store_t *st, rd_store_queue_t q, long long id, const char *reason,
                  rd_store_messages_cb cb, void *arg);
/* res->stats with the top `top` errors. */
int rd_store_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg);
/* One page of q's fairness groups in name order, after the name cursor
 * (NULL or len 0: the first page), at most limit (1..1000): each group with
 * a pending or processing message once (res->groups); res->next_cursor is
 * empty at the end. */
int rd_store_groups(rd_store_t *st, rd_store_queue_t q, const char *cursor, size_t cursor_len,
                    int limit, rd_store_groups_cb cb, void *arg);
/* Samples q's time series, then answers one resolution of it: "minute" or
 * "hour" (RD_SERIES_NAMES). A lost link answers RD_STORE_UNAVAILABLE: the
 * sample is idempotent, nobody asked for a state change. */
int rd_store_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg);
/* Whether ticks sample the time series (--series, on by default; the
 * registry's nudges are rd_registry_new's). */
void rd_store_set_series(rd_store_t *st, bool on);
/* The timer's call: reclaim, promote, retention, at most limit of each. */
int rd_store_tick(rd_store_t *st, rd_store_queue_t q, int limit, long long dead_ttl_ms,
                  long long succeeded_ttl_ms, rd_store_tick_cb cb, void *arg);
/* One page of registered queue names in name order (res->names, res->count),
 * after cursor (NULL or len 0: the first page), at most limit (1..1000);
 * res->total is how many are registered, res->next_cursor empty at the end. */
int rd_store_queues_page(rd_store_t *st, const char *cursor, size_t cursor_len, int limit,
                         rd_store_page_cb cb, void *arg);

/* Records q's dead_letter_queue (target; len 0: none) in the registry's
 * graph, unless it leads back to q (docs/lifecycle.md "Cycles"): res->strings
 * is {"ok"}, {"cycle", q, ..., q} (the chain) or {"too_long"}; nothing is
 * written for the last two. Sent before policy_set writes the field. */
/* One bounded batch of emptying q (lua/46_drop.lua; src/queue_clear.c
 * repeats it to the end): drop (every key of q, then unregister) or purge
 * all (every message, the queue kept). unregistered: drop only, the caller
 * ran rd_store_queue_forget after RD_CLEAR_UNREGISTER. */
int rd_store_drop_queue(rd_store_t *st, rd_store_queue_t q, bool unregistered,
                        rd_store_cleared_cb cb, void *arg);
int rd_store_purge_all(rd_store_t *st, rd_store_queue_t q, rd_store_cleared_cb cb, void *arg);
/* Takes q out of the registry, its names index, the timer schedule and the
 * dead-letter-queue graph (q's own link). res->n: 1 when it was registered. */
int rd_store_queue_forget(rd_store_t *st, rd_store_queue_t q, rd_store_count_cb cb, void *arg);
/* A page of the queues whose dead_letter_queue is q: res->strings is
 * {next_cursor ("0": the end), name...}; cursor NULL or "0" first; count
 * 1..1000 links looked at (the page may be short, even empty). */
int rd_store_dlq_sources(rd_store_t *st, rd_store_queue_t q, const char *cursor, int count,
                         rd_store_strings_cb cb, void *arg);
/* Tags (lua/66_tags.lua): set n key, value pairs (strs[2i], strs[2i+1];
 * 1..RD_TAGS_MAX) or remove n keys; res->n the tags the queue has then;
 * a set that would pass RD_TAGS_MAX changes nothing and answers
 * RD_STORE_INVALID_STATE (state "too_many"). get: res->strings
 * {key, value, ...}. */
int rd_store_tags_set(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_str_t *strs,
                      rd_store_count_cb cb, void *arg);
int rd_store_tags_remove(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_str_t *keys,
                         rd_store_count_cb cb, void *arg);
int rd_store_tags_get(rd_store_t *st, rd_store_queue_t q, rd_store_strings_cb cb, void *arg);

int rd_store_dlq_link(rd_store_t *st, rd_store_queue_t q, rd_store_queue_t target,
                      rd_store_strings_cb cb, void *arg);

/* A sharded queue's layout (docs/sharding.md "Changing shards on a live
 * queue"; lua/06_shards.lua; src/store_shards.c). Each answers strings: the
 * function's reply as it is. shards_set on q's shard 0 (mode "raise" with
 * m and salts "s1,...,s(m-1)", "close" with m the rev seen, "lower_begin"
 * m, "lower_abort", "lower_commit" m); policy_pairs: policy_get's flat
 * pairs of q.shard; policy_copy: those pairs (shard 0's) installed on
 * q.shard, the rev their layout.rev; shard_retire on q.shard (mode
 * "check", "retire" with rev the lowering's, "unretire"; rev NULL but for
 * "retire"); shard_scan: one step of q.shard's walk after a raise, rev
 * the layout's; libraries: the names of the loaded
 * Functions libraries whose name starts with "retryd". */
int rd_store_shards_set(rd_store_t *st, rd_store_queue_t q, const char *mode, long long m,
                        const char *salts, rd_store_strings_cb cb, void *arg);
int rd_store_policy_pairs(rd_store_t *st, rd_store_queue_t q, rd_store_strings_cb cb, void *arg);
int rd_store_policy_copy(rd_store_t *st, rd_store_queue_t q, const rd_str_t *pairs, size_t n,
                         rd_store_strings_cb cb, void *arg);
int rd_store_shard_retire(rd_store_t *st, rd_store_queue_t q, const char *mode, const char *rev,
                          rd_store_strings_cb cb, void *arg);
int rd_store_shard_scan(rd_store_t *st, rd_store_queue_t q, const char *rev,
                        rd_store_strings_cb cb, void *arg);
int rd_store_libraries(rd_store_t *st, rd_store_strings_cb cb, void *arg);
/* An empty claim said q is sharded (res->sharded) and this daemon has no
 * view of it: one policy_get of shard 0 teaches it, in the background. */
void rd_store_learn_view(rd_store_t *st, rd_store_queue_t q);
/* The same whether or not a view exists (a tick said another count). */
void rd_store_relearn_view(rd_store_t *st, rd_store_queue_t q);
/* The same, now, and cb (with the read's status) once the view is learned:
 * a face that found its view wrong ({"reshard"}) reads it before it goes on. */
int rd_store_read_view(rd_store_t *st, rd_store_queue_t q, rd_store_status_cb cb, void *arg);
/* This daemon's view of q (NULL: one shard), read again in the background
 * when it is RD_SHARD_VIEW_REFRESH_MS old (shard_view.h). Every face looks
 * views up through it. */
struct rd_shard_view *rd_store_view(rd_store_t *st, rd_store_queue_t q);

/* ---- message move tasks (lua/67_moves.lua, docs/sqs.md "Message move tasks") ----
 * Every reply is rd_store_strings_t: the function's reply, each element a
 * string. A task in a reply is RD_STORE_MOVE_TASK_FIELDS strings, read with
 * rd_store_move_task_at. */

enum { RD_STORE_MOVE_TASK_FIELDS = 8, RD_STORE_MOVE_TASKS_MAX = 10, RD_STORE_MOVE_RATE_MAX = 500 };

typedef struct rd_store_move_task {
    long long id;
    rd_str_t status;            /* RUNNING CANCELLING COMPLETED CANCELLED FAILED */
    rd_str_t destination;       /* empty: each letter's origin queue */
    long long rate;             /* messages per second, 0: unpaced */
    long long started_ms, moved, to_move;
    rd_str_t reason;            /* FAILED's, else empty */
} rd_store_move_task_t;

/* The task at res->strings[at..at+8) into *out (borrowing the strings);
 * false when they are not one. */
bool rd_store_move_task_at(const rd_store_strings_t *res, size_t at, rd_store_move_task_t *out);
/* A new task on source, run by runner with a lease of lease_ms: {"ok", id,
 * started_ms, to_move} | {"running", id} (one is active). destination.len 0:
 * each letter's origin; rate 0..500 (0: unpaced). */
int rd_store_move_start(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t destination,
                        long long rate, const char *runner, long long lease_ms,
                        rd_store_strings_cb cb, void *arg);
/* Takes over source's active task if its lease ran out (or runner holds
 * it): {"ok", lease_until_ms, task} | {"busy", lease_until_ms} | {"none"}. */
int rd_store_move_claim(rd_store_t *st, rd_store_queue_t source, const char *runner,
                        long long lease_ms, rd_store_strings_cb cb, void *arg);
/* The runner's report: moved since the last one, the lease renewed; end
 * NULL (go on), "release", "COMPLETED", "CANCELLED" or "FAILED" (reason).
 * {"ok", status} | {"lost"}. */
int rd_store_move_report(rd_store_t *st, rd_store_queue_t source, long long task,
                         const char *runner, long long moved, long long lease_ms,
                         const char *end, const char *reason, rd_store_strings_cb cb, void *arg);
/* {"ok", moved} | {"not_found"} | {"invalid_state", status}. */
int rd_store_move_cancel(rd_store_t *st, rd_store_queue_t source, long long task,
                         rd_store_strings_cb cb, void *arg);
/* The max (1..10) newest tasks, newest first: 8 strings each. */
int rd_store_move_list(rd_store_t *st, rd_store_queue_t source, int max, rd_store_strings_cb cb,
                       void *arg);
/* The registry's watch list: source looked at again at at_ms (-1: dropped),
 * only if its score is still expect_ms (-1: whatever it is): {"1"} when it
 * acted, else {"0"}. */
int rd_store_move_watch(rd_store_t *st, rd_store_queue_t source, long long at_ms,
                        long long expect_ms, rd_store_strings_cb cb, void *arg);
/* At most count (1..1000) watched sources due now: {name, score, ...}. */
int rd_store_move_due(rd_store_t *st, int count, rd_store_strings_cb cb, void *arg);

/* ---- the timer schedule (promoter.c) ---- */

/* Takes at most limit (1..1000) queues whose timer is due, leased for
 * lease_ms, and runs the registry sweep when its time has come (sweep_batch 0:
 * never). res->token (0 when none was due), res->names and res->count,
 * res->next_in_ms until the earliest entry left (-1 none). */
int rd_store_timer_take(rd_store_t *st, int limit, long long lease_ms, int sweep_batch,
                        long long sweep_every_ms, long long sweep_cycle_ms, rd_store_taken_cb cb,
                        void *arg);
/* What a round's ticks found, per queue it took. */
typedef enum rd_timer_alerts {
    RD_TIMER_ALERTS_UNSAID,   /* nothing to say (not looked, or delivered here) */
    RD_TIMER_ALERTS_NONE,     /* looked: none; the queue leaves the hand-over set */
    RD_TIMER_ALERTS_HANDOFF,  /* alerts for an --alert-url instance: hand them over */
} rd_timer_alerts_t;
typedef struct rd_timer_report {
    rd_store_queue_t queue;
    long long next_in_ms;     /* from its tick; -1: idle */
    bool empty;               /* no key left: it may leave the registry */
    rd_timer_alerts_t alerts;
} rd_timer_report_t;
enum { RD_STORE_REPORTS_MAX = 64 };
/* Reports n (1..RD_STORE_REPORTS_MAX) ticks of the round token; res->left
 * is how many queues left the registry. */
int rd_store_timer_done(rd_store_t *st, long long token, const rd_timer_report_t *reports,
                        size_t n, rd_store_done_cb cb, void *arg);
/* register (the registry's slot): q exists; with in_ms >= 0 the timer
 * ticks it within in_ms. res->n is 1. Sent by src/registry.c. */
int rd_store_register(rd_store_t *st, rd_store_queue_t q, long long in_ms, rd_store_count_cb cb,
                      void *arg);
/* release_lost: releases what the claims with nonces[0..n) (1..10) leased,
 * as release does; res->released. Sent by src/lost_claims.c. */
int rd_store_release_lost(rd_store_t *st, rd_store_queue_t q, size_t n,
                          const char *const *nonces, rd_store_released_cb cb, void *arg);
/* CONFIG GET pattern: res->strings are name, value pairs. */
int rd_store_config_get(rd_store_t *st, const char *pattern, rd_store_strings_cb cb, void *arg);
/* The queue's policy (docs/reference.md "Queue policy and flow control"). get answers the stored fields (unset ones
 * as rd_policy_init leaves them); set replaces the whole policy with p's set
 * fields (the pause is kept) and answers it; pause pauses or resumes. */
int rd_store_policy_get(rd_store_t *st, rd_store_queue_t q, rd_store_policy_cb cb, void *arg);
int rd_store_policy_set(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                        rd_store_policy_cb cb, void *arg);
/* Writes p (as a PUT would) only when the queue has no policy yet, and
 * answers the policy stored now either way, res->created saying which
 * (SQS's CreateQueue compares the attributes itself). Registers the queue as
 * policy_set does. A field the library refuses answers RD_STORE_ERROR with
 * its reason in detail, as policy_set. */
int rd_store_policy_create(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                           rd_store_policy_cb cb, void *arg);
int rd_store_pause(rd_store_t *st, rd_store_queue_t q, bool paused, rd_store_policy_cb cb,
                   void *arg);

/* PING: res->status is RD_STORE_OK when Redis answered PONG. */
int rd_store_ping(rd_store_t *st, rd_store_status_cb cb, void *arg);

/* ---- hooks: what the modules above the store keep of its calls ---- */

/* What a write to a queue answered, for the timer schedule. */
typedef struct rd_store_written {
    long long hint_ms;        /* the reply's timer hint: -1 none, else tick within it */
    bool first;               /* an enqueue that got id 1 */
    bool changed;             /* the call wrote (a claim that took nothing did not) */
    bool unknown;             /* the answer was lost (or unreadable): the call may have
                                 written and its hint is not known; the rest is unset */
} rd_store_written_t;

/* A written hook: true when it sent a registration that must be applied
 * before anyone hears of the write (the callback then waits for it, and
 * the hook calls resume(resume_arg) once, from the loop, when it has
 * answered, whatever the answer); false when the callback may run now.
 * resume is NULL for an unknown answer, which must not wait. */
typedef bool (*rd_store_written_fn)(void *arg, rd_store_queue_t q, const rd_store_written_t *w,
                                    void (*resume)(void *resume_arg), void *resume_arg);

/* before (NULL: none) runs before an enqueue, policy_set, pause or
 * redrive_in of q is sent, with always true for policy_set and pause (a queue made by
 * its policy, as CreateQueue does, is registered whatever the caller
 * remembers: it may have been dropped since, on any instance); written
 * (NULL: none) after each write to a queue (the hinted rows) has answered
 * OK or unknown, before its callback. Both from the loop; arg is theirs.
 * src/registry.c installs them. */
void rd_store_set_write_hooks(rd_store_t *st,
                              void (*before)(void *arg, rd_store_queue_t q, bool always),
                              rd_store_written_fn written,
                              void *arg);
/* A claim's nonce: "<instance>.<seq>", shorter than this. */
enum { RD_STORE_NONCE_MAX = 40 };
/* lost (NULL: none) runs when a claim or settle-and-claim with a nonce lost
 * its answer (the link dropped with it in flight), before its callback:
 * what it leased may be released with release_lost once the link is
 * back. src/lost_claims.c installs it. */
void rd_store_set_lost_claim_hook(rd_store_t *st,
                                  void (*lost)(void *arg, rd_store_queue_t q, const char *nonce),
                                  void *arg);
/* release (NULL: none) takes over rd_store_release_orphans: it releases
 * the messages with rd_store_release and sends a call that got no answer
 * again once Redis answers (src/lost_claims.c installs it). Without it a
 * release that fails is logged and those leases expire instead. */
void rd_store_set_orphans_hook(rd_store_t *st,
                               void (*release)(void *arg, rd_store_queue_t q, size_t n,
                                               const rd_message_t *msgs),
                               void *arg);

#endif
