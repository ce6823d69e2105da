/* message.h - a message as the functions return it, its JSON form, and a
 * worker's settlement of one. No Redis type appears here: the store's
 * parsers (store_replies.c) fill these from the replies.
 *
 * A message's strings are borrowed from the Redis reply it was read from and
 * are valid only inside the callback that delivered it. */
#ifndef RETRYD_MESSAGE_H
#define RETRYD_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/jsonw.h"

typedef enum rd_status {
    RD_STATUS_PENDING,
    RD_STATUS_PROCESSING,
    RD_STATUS_SUCCEEDED,
    RD_STATUS_DEAD,
    RD_STATUS_UNKNOWN,
} rd_status_t;

typedef struct rd_str {
    const char *ptr;        /* borrowed; NULL means "absent" */
    size_t len;
} rd_str_t;

typedef struct rd_message {
    long long id;
    rd_status_t status;
    rd_str_t payload;
    int retry_count;
    int max_retries;
    int priority;                   /* 0-9, claimed highest first (docs/reference.md "Priority") */
    long long retry_after_ms;       /* epoch ms, -1 when none */
    rd_str_t last_error;
    long long lease_expires_at_ms;  /* epoch ms, -1 when not leased */
    rd_str_t lease_token;
    rd_str_t idempotency_key;
    long long created_at_ms;
    long long updated_at_ms;
    long long expires_at_ms;        /* epoch ms, -1 when the message does not expire */
    rd_str_t worker;                /* the claim's worker, while processing */
    /* The per-attempt history (docs/dead-letters.md §1) as the functions
     * return it: history_len strings, RD_HISTORY_FIELDS per entry (kind
     * "failed" | "replayed", at ms, attempt, lease_expired "1" | "0", worker
     * "" for none, error; ptr NULL for an element that was not a string);
     * NULL when the message has none. The array belongs to the result that
     * delivered the message, its strings to the reply. */
    const rd_str_t *history;
    size_t history_len;
    long long history_dropped;
    rd_str_t origin_queue;          /* a redriven message: where it was a dead letter */
    long long origin_id;            /* its id there, -1 when none */
    rd_str_t redriving_to;          /* a dead letter being redriven: its target queue */
    rd_str_t group;                 /* its fairness group (docs/reference.md "Fairness
                                       groups"); ptr NULL for none */
    rd_str_t attributes;            /* opaque bytes the enqueue gave (the SQS face's packed
                                       MessageAttributes); ptr NULL for none */
    long long first_received_at_ms; /* its first claim, epoch ms, kept only for an enqueue
                                       that asked (record_first_receive); -1 none */
} rd_message_t;

#define RD_HISTORY_FIELDS 6

/* One settlement a worker reports (docs/reference.md "Settle and claim", settle on claim): what succeed,
 * fail or snooze would be told about one message. Strings are borrowed. */
typedef struct rd_settlement {
    long long id;
    const char *lease_token;        /* NULL: accept any current lease */
    bool failed;                    /* false: succeeded (or snoozed) */
    bool snoozed;                   /* put off for delay_ms (docs/reference.md "Snooze"); failed is false */
    const char *error;              /* failed: kept as last_error */
    bool retryable;                 /* failed: false -> dead now */
    long long retry_after_ms;       /* failed: -1 for the backoff table */
    long long delay_ms;             /* snoozed: 0..RD_DELAY_SECONDS_MAX * 1000 */
} rd_settlement_t;

/* The decimal integer in s[0..len), or -1 when it is not one (Redis replies
 * and hash values are parsed with this). */
long long rd_str_to_ll(const char *s, size_t len);
/* s as a decimal integer, 0 when it is none (NULL, empty, other bytes). */
long long rd_str_number(const rd_str_t *s);

const char *rd_status_name(rd_status_t s);
/* Returns the status named s[0..len), or RD_STATUS_UNKNOWN. */
rd_status_t rd_status_parse(const char *s, size_t len);

/* An empty message: no optional fields, unknown status. */
void rd_message_init(rd_message_t *m);
/* Applies one hash field as the functions store it; unknown fields are ignored. */
void rd_message_set_field(rd_message_t *m, const char *name, size_t name_len,
                          const char *value, size_t value_len);

/* RFC 3339 UTC with milliseconds: "2026-11-30T07:01:39.123Z" (out >= 32 bytes). */
void rd_format_time_ms(long long epoch_ms, char *out);

/* Writes the message's JSON object (docs/reference.md "Messages") as the next value of w;
 * lease_token only when with_token. */
void rd_message_write_json(rd_jsonw_t *w, const rd_message_t *m, const char *queue,
                           size_t queue_len, bool with_token);

#endif
