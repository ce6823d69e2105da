/* request.h - request bodies and query strings: parsing and validation into
 * plain structs, with every bad field reported (docs/reference.md "Validation"). Pure: no I/O.
 *
 * A parse function returns RD_REQ_OK; RD_REQ_MALFORMED when the body is not a
 * JSON object (a 400); RD_REQ_INVALID with errs filled (a 422). Strings in the
 * struct are borrowed from its doc, released by rd_request_free. */
#ifndef RETRYD_REQUEST_H
#define RETRYD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/json.h"
#include "retryd/limits.h"
#include "retryd/message.h"
#include "retryd/policy.h"
#include "retryd/problem.h"

/* RD_REQ_BATCH: rd_request_enqueue's body is a batch ({"messages": [...]}):
 * hand it to rd_request_enqueue_batch. */
typedef enum rd_req_result { RD_REQ_OK, RD_REQ_MALFORMED, RD_REQ_INVALID, RD_REQ_BATCH } rd_req_result_t;

typedef struct rd_enqueue_req {
    rd_json_t *doc;
    const char *payload;
    size_t payload_len;
    int max_retries;
    bool max_retries_given;   /* false: the queue's policy decides (docs/reference.md "Queue policy and flow control") */
    long long delay_ms;       /* -1 unless delay_seconds is given: the policy's delay_seconds */
    long long ttl_ms;             /* -1 unless ttl_seconds given: the policy's message_ttl applies */
    int priority;                 /* 0 unless given */
    const char *idempotency_key;  /* NULL when absent; 1-255 bytes */
    const char *group;            /* NULL when absent or null; 1-RD_GROUP_MAX bytes of UTF-8
                                     without control characters (docs/reference.md
                                     "Fairness groups") */
    size_t group_len;
    rd_json_t *marked;            /* RD_REQ_BATCH only: the body's NUL-marked twin, or NULL */
    bool malformed;               /* a batch's item that is not a JSON object (its 400) */
} rd_enqueue_req_t;

/* POST /queues/{q}/messages with {"messages": [...]} (docs/reference.md
 * "Batch enqueue"). */
typedef struct rd_enqueue_batch_req {
    rd_json_t *doc, *marked;      /* owned: rd_request_enqueue_batch_free */
    size_t count;                 /* 1..RD_ENQUEUE_BATCH_MAX */
    rd_enqueue_req_t *items;      /* count, in request order; strings borrowed from doc */
    rd_field_errors_t *errs;      /* count: errs[i].count > 0 when item i is invalid (its 422) */
    size_t invalid;               /* items malformed or with errors */
} rd_enqueue_batch_req_t;

typedef struct rd_claim_req {
    rd_json_t *doc;
    long long lease_ms;       /* the daemon default unless given */
    bool lease_given;         /* false: the queue's policy overrides that default */
    long long wait_ms;        /* -1 unless given: the queue policy's wait_seconds applies */
    int count;                /* 1 unless given */
    bool batch;               /* count was given: answer {messages:[...]} */
    const char *worker;       /* NULL when absent; 1-RD_WORKER_MAX bytes of UTF-8 */
    size_t nsettle;           /* settle given: 1..RD_SETTLE_BATCH_MAX items, else 0 */
    rd_settlement_t settle[RD_SETTLE_BATCH_MAX];  /* in request order */
} rd_claim_req_t;

typedef struct rd_settle_req {
    rd_json_t *doc;
    const char *lease_token;  /* NULL when absent */
    const char *error;        /* fail: required */
    bool retryable;           /* fail: default true */
    long long retry_after_ms; /* fail: -1 unless retry_after_seconds given */
    long long lease_ms;       /* extend: the daemon default unless given */
    bool lease_given;         /* extend: false: the queue's policy overrides that default */
    long long delay_ms;       /* snooze: required (delay_seconds) */
} rd_settle_req_t;

typedef struct rd_ack_req {
    rd_json_t *doc;
    size_t count;                               /* 1..RD_ACK_BATCH_MAX */
    long long ids[RD_ACK_BATCH_MAX];
    const char *tokens[RD_ACK_BATCH_MAX];                    /* NULL: any lease */
    bool snoozed[RD_ACK_BATCH_MAX];     /* outcome "snoozed" (else succeeded) ... */
    long long delay_ms[RD_ACK_BATCH_MAX];                    /* ... for delay_seconds */
    bool any_snoozed;
} rd_ack_req_t;

typedef struct rd_replay_req {
    rd_json_t *doc;
    const char *mode;           /* "ids" | "all" | "error" */
    long long *ids;             /* mode ids: owned, free with rd_request_replay_free */
    size_t count;
    const char *needle;         /* mode error: the error_contains text */
    const char *to;             /* redrive: the target queue (NULL: replay in place) */
    size_t to_len;
} rd_replay_req_t;

typedef struct rd_list_req {
    char status[16];          /* "" for every state */
    int limit;
    char cursor[128];         /* "" for the first page */
    char error_contains[RD_LIST_FILTER_MAX + 1]; /* "" for no filter on last_error */
    long long since_ms;       /* -1, or updated_at >= this (RFC 3339 `since`) */
    long long until_ms;       /* -1, or updated_at <= this (RFC 3339 `until`) */
} rd_list_req_t;

/* GET /queues: ?limit=1..1000 (100)&cursor=<next_cursor>. */
typedef struct rd_queues_req {
    int limit;
    char cursor[RD_QUEUE_NAME_MAX + 1];   /* a queue name; cursor_len 0: the first page */
    size_t cursor_len;
} rd_queues_req_t;

/* GET /queues/{q}/groups: ?limit=1..1000 (100)&cursor=<next_cursor>, the
 * cursor the hex of the last group of the previous page (docs/reference.md
 * "Fairness groups"). */
typedef struct rd_groups_req {
    int limit;
    char cursor[RD_GROUP_MAX + 8];   /* the group name it stands for, after a sharded
                                        queue's "s<k>."; cursor_len 0: the first page */
    size_t cursor_len;
} rd_groups_req_t;

/* A single enqueue's body, or RD_REQ_BATCH when it has "messages" (out->doc
 * and out->marked are then kept for rd_request_enqueue_batch; a caller that
 * stops there frees both). */
rd_req_result_t rd_request_enqueue(const char *body, size_t len, rd_enqueue_req_t *out,
                                   rd_field_errors_t *errs);
/* Takes over e's documents (after RD_REQ_BATCH): RD_REQ_INVALID with errs
 * naming the body's field ("messages" not an array of 1 to
 * RD_ENQUEUE_BATCH_MAX, or a single enqueue's field beside it: "payload",
 * ...), nothing kept; else RD_REQ_OK with every item checked as a single
 * enqueue's body is (the same function: its own errors under the same
 * field names, or malformed when it is not an object). Free out with
 * rd_request_enqueue_batch_free. */
rd_req_result_t rd_request_enqueue_batch(rd_enqueue_req_t *e, rd_enqueue_batch_req_t *out,
                                         rd_field_errors_t *errs);
void rd_request_enqueue_batch_free(rd_enqueue_batch_req_t *b);
/* Fields may come in the body or the query string (the body wins). settle
 * (docs/reference.md "Settle and claim") comes only in the body: a list of 1-100 {id, lease_token?,
 * outcome: "succeeded"|"failed"|"snoozed", error? (required for failed), retryable?,
 * retry_after_seconds?, delay_seconds? (required for snoozed)}, each checked as the
 * succeed, fail and snooze routes check theirs; errors name the item, e.g. field
 * "settle[2].error". */
rd_req_result_t rd_request_claim(const char *body, size_t len, const char *query,
                                 size_t query_len, long long default_lease_ms,
                                 rd_claim_req_t *out, rd_field_errors_t *errs);
rd_req_result_t rd_request_succeed(const char *body, size_t len, rd_settle_req_t *out,
                                   rd_field_errors_t *errs);
rd_req_result_t rd_request_fail(const char *body, size_t len, rd_settle_req_t *out,
                                rd_field_errors_t *errs);
/* {lease_token?, delay_seconds (required, 0-2592000)} (docs/reference.md "Snooze");
 * an empty body is {} (422 on delay_seconds). */
rd_req_result_t rd_request_snooze(const char *body, size_t len, rd_settle_req_t *out,
                                  rd_field_errors_t *errs);
rd_req_result_t rd_request_extend(const char *body, size_t len, long long default_lease_ms,
                                  rd_settle_req_t *out, rd_field_errors_t *errs);
/* {messages:[{id, lease_token?, outcome? ("succeeded" or "snoozed"),
 * delay_seconds? (required for snoozed)}, ...]} with 1-100 items; errors name
 * the item, e.g. field "messages[3].id". */
rd_req_result_t rd_request_ack(const char *body, size_t len, rd_ack_req_t *out,
                               rd_field_errors_t *errs);
/* {ids:[...]} (1-1000) | {all:true} | {error_contains:"..."} (1-1000 bytes):
 * exactly one of them. */
rd_req_result_t rd_request_replay(const char *body, size_t len, rd_replay_req_t *out,
                                  rd_field_errors_t *errs);
void rd_request_replay_free(rd_replay_req_t *r);
/* {reason?}: the text kept as last_error of a message killed by hand. */
rd_req_result_t rd_request_kill(const char *body, size_t len, rd_settle_req_t *out,
                                rd_field_errors_t *errs);
/* ?top=1..100 (10): how many top errors GET /queues/{q}/stats lists. */
rd_req_result_t rd_request_stats(const char *query, size_t query_len, int *top,
                                 rd_field_errors_t *errs);
/* ?series=minute|hour: the time series GET /queues/{q}/stats adds; *out is
 * NULL when absent, else "minute" or "hour" (static strings). */
rd_req_result_t rd_request_series(const char *query, size_t query_len, const char **out,
                                  rd_field_errors_t *errs);
/* replay takes no fields, but a body, when sent, must still be a JSON object. */
rd_req_result_t rd_request_empty(const char *body, size_t len);
rd_req_result_t rd_request_list(const char *query, size_t query_len, rd_list_req_t *out,
                                rd_field_errors_t *errs);
rd_req_result_t rd_request_queues(const char *query, size_t query_len, rd_queues_req_t *out,
                                  rd_field_errors_t *errs);
rd_req_result_t rd_request_groups(const char *query, size_t query_len, rd_groups_req_t *out,
                                  rd_field_errors_t *errs);

/* RFC 3339 ("2026-11-30T07:01:39Z", fractions and offsets allowed) to epoch
 * ms; -1 when invalid, a day the month has not (2026-02-31) included. */
long long rd_parse_rfc3339_ms(const char *s);

/* Checks a decoded queue name: 1-255 bytes of valid UTF-8, no control
 * characters, not "." or "..". Adds a "queue" error and returns false
 * otherwise. */
bool rd_request_queue_name(const char *name, size_t len, rd_field_errors_t *errs);

/* What is wrong with a name a request gives (a queue name, a group). */
typedef enum rd_name_problem {
    RD_NAME_OK, RD_NAME_LENGTH, RD_NAME_UTF8, RD_NAME_CONTROL, RD_NAME_DOTS
} rd_name_problem_t;

/* The member field of doc naming a queue (a redrive's "to", the policy's
 * dead_letter_queue; marked: doc's NUL-marked twin, or NULL): RD_NAME_OK and
 * *name NULL when absent or null, RD_NAME_OK and *name the name when it is
 * one, else what is wrong with it (a U+0000, which cJSON cut short, is a
 * control character). */
int rd_request_queue_name_member(const rd_json_t *doc, const rd_json_t *marked,
                                 const char *field, const char **name);

/* The decoded value of name in a query string, into out (cap bytes). Returns
 * the length, -1 when absent, -2 when undecodable or too long: the limit,
 * cap - 1 bytes, is on the decoded value, however long its encoding. */
long rd_query_get(const char *query, size_t query_len, const char *name, char *out,
                  size_t cap);

void rd_request_free(rd_json_t *doc);

/* PUT /queues/{q}/policy: the whole object (absent or null fields take their
 * defaults); one error per bad field, named as in the body ("backoff.jitter",
 * "rate_limit.burst"). Durations are integer seconds or "30d"-style strings.
 * "paused" is ignored (pause and resume change it); any other field is
 * refused. dead_letter_rules errors name the rule ("dead_letter_rules[2].action",
 * 0-based). On RD_REQ_OK the caller calls rd_policy_free. */
rd_req_result_t rd_request_policy(const char *body, size_t len, rd_policy_t *out,
                                  rd_field_errors_t *errs);

#endif
