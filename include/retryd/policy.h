/* policy.h - a queue's policy (docs/flow-control.md): the field/value pairs
 * the policy functions store and answer, and its JSON form with the defaults
 * filled in. The PUT body's parser is request.h's rd_request_policy. Pure:
 * no I/O. */
#ifndef RETRYD_POLICY_H
#define RETRYD_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "retryd/jsonw.h"
#include "retryd/message.h"

#define RD_POLICY_MAX_IN_FLIGHT_MAX 1000000
#define RD_POLICY_TTL_SECONDS_MAX (3650LL * 86400)  /* 10 years, as the library checks */

/* Every field is "not set" (its default applies) until given. */
typedef struct rd_policy {
    long long max_retries;      /* 0: not set (3); 1..RD_POLICY_MAX_RETRIES_MAX;
                                   RD_POLICY_UNLIMITED: "unlimited" */
    long long base_seconds;     /* 0: not set (1) */
    long long max_seconds;      /* 0: not set (3600) */
    char jitter[8];             /* "": not set ("none") */
    long long lease_seconds;    /* 0: not set (the daemon's --lease-seconds) */
    long long dead_ttl_s;       /* -1: not set (the daemon's --dead-ttl) */
    long long succeeded_ttl_s;  /* -1: not set (the daemon's --succeeded-ttl) */
    long long max_in_flight;    /* 0: no cap; -1: not given (rd_policy_init) */
    double per_second;          /* 0: no rate limit */
    long long burst;
    bool paused;
    /* dead_letter_rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2): the list as the
     * canonical JSON array policy_set stores, NULL when there are none. From
     * a PUT it is owned (rules_owned, rd_policy_free); from policy_get it
     * points into the reply. */
    const char *rules;
    size_t rules_len;
    char *rules_owned;
    /* alert_url (docs/dead-letters.md §3): where this queue's alerts go, NULL
     * when not set (the daemon's --alert-url). Owned and pointing as rules. */
    const char *alert_url;
    size_t alert_url_len;
    char *alert_url_owned;
    /* The message lifecycle (docs/reference.md "Expiry", "Dead-letter queue"). */
    long long message_ttl_s;    /* -1: not set (0, no expiry) */
    char on_expiry[8];          /* "": not set ("dead") */
    /* dead_letter_queue: where this queue's deaths move, NULL when not set.
     * Owned and pointing as rules. */
    const char *dead_letter_queue;
    size_t dead_letter_queue_len;
    char *dead_letter_queue_owned;
    /* Fairness groups (docs/reference.md "Fairness groups"). */
    long long group_max_in_flight;  /* -1: not set (0, no cap per group) */
    double group_per_second;        /* 0: no rate limit per group */
    long long group_burst;
    int fifo_groups;                /* -1: not set (false); else 0 or 1 */
    /* The SQS endpoint's fields (docs/reference.md "Queue policy and flow
     * control", docs/sqs.md section 3). */
    char lease_expiry[12];          /* "": not set ("backoff"); or "redeliver" */
    long long delay_seconds;        /* -1: not set (0): an enqueue's default delay */
    long long max_payload_bytes;    /* 0: not set (no limit beyond --max-body) */
    long long wait_seconds;         /* -1: not set (0): a claim's default long poll */
    int sqs;                        /* -1: not set (false); else 0 or 1 */
    int content_based_dedup;        /* -1: not set (false); else 0 or 1 */
    /* shards (docs/reference.md "Shards"): how many shards the queue spreads
     * over. 0: not set (1). From a PUT 1..RD_SHARDS_MAX; never among
     * rd_policy_args (shards_set changes it, docs/sharding.md). */
    long long shards;
    /* The layout of a queue that had more than one shard, from policy_get
     * ("layout.<field>"; 0 and empty when it never had). */
    struct {
        long long rev, hw, from, lowering;
        rd_str_t salts;             /* "s1,s2,...": shard k's salt, k 1..; into the reply */
    } layout;
    /* Written by the library's policy_set (ms), read-only: 0 when not set. */
    long long created_at_ms;
    long long updated_at_ms;
    /* The top-level fields the body gave as null (RD_POLICY_NULL_* bits): a
     * PATCH puts those back to their defaults (docs/reference.md "Queue
     * policy and flow control"). */
    unsigned nulls;
    bool patch;                 /* a PATCH: only the fields given change */
} rd_policy_t;

/* The fields a PATCH can put back to their defaults with null, in this order;
 * each bit is 1 << its index. */
#define RD_POLICY_FIELDS(X)                                                            \
    X(max_retries) X(backoff) X(lease_seconds) X(dead_ttl) X(succeeded_ttl)            \
    X(max_in_flight) X(rate_limit) X(dead_letter_rules) X(alert_url) X(message_ttl)    \
    X(on_expiry) X(dead_letter_queue) X(group_max_in_flight) X(group_rate_limit)       \
    X(fifo_groups) X(lease_expiry) X(delay_seconds) X(max_payload_bytes) X(wait_seconds) \
    X(sqs) X(content_based_dedup)
enum {
#define RD_POLICY_NULL_BIT(name) RD_POLICY_NULL_INDEX_##name,
    RD_POLICY_FIELDS(RD_POLICY_NULL_BIT)
#undef RD_POLICY_NULL_BIT
    RD_POLICY_FIELD_COUNT
};
#define RD_POLICY_NULL(name) (1u << RD_POLICY_NULL_INDEX_##name)

/* max_retries of a policy: 1..1000, or "unlimited" (RD_POLICY_UNLIMITED;
 * a message then has max_retries -1, docs/reference.md "Messages"). */
#define RD_POLICY_MAX_RETRIES_MAX 1000
#define RD_POLICY_UNLIMITED (-1)
#define RD_POLICY_DELAY_SECONDS_MAX 900
#define RD_POLICY_PAYLOAD_BYTES_MIN 1024
#define RD_POLICY_PAYLOAD_BYTES_MAX 1048576
#define RD_POLICY_WAIT_SECONDS_MAX 20

/* message_ttl is at most 30 days, as ttl_seconds on enqueue. */
#define RD_POLICY_MESSAGE_TTL_MAX 2592000

/* At most this many rules; a rule's error_contains / error_prefix is 1-255 bytes. */
#define RD_POLICY_RULES_MAX 20
#define RD_POLICY_RULE_TEXT_MAX 255

/* An alert_url is an absolute http:// or https:// URL (a host after the
 * "//") of 1-2048 bytes of UTF-8, without spaces or control characters. */
#define RD_POLICY_ALERT_URL_MAX 2048
bool rd_policy_alert_url_valid(const char *s, size_t len);

/* The daemon's defaults a GET fills in. */
typedef struct rd_policy_defaults {
    long long lease_ms, dead_ttl_ms, succeeded_ttl_ms;
} rd_policy_defaults_t;

void rd_policy_init(rd_policy_t *p);
/* Releases what a PUT's parse owns (the rules' JSON, the alert_url). */
void rd_policy_free(rd_policy_t *p);

/* Every field rd_policy_args can give: 22 pairs. */
enum { RD_POLICY_ARGS_MAX = 44 };
/* The field, value pairs of the set fields, as policy_set takes them: names
 * into names[], values formatted into values[] (one per pair). Returns how
 * many strings (2 per field). The rules, the alert_url and the
 * dead_letter_queue are not among them: the caller adds "dead_letter_rules",
 * p->rules when p->rules is set, and so on for the others. */
size_t rd_policy_args(const rd_policy_t *p, const char *out[RD_POLICY_ARGS_MAX],
                      char values[RD_POLICY_ARGS_MAX / 2][32]);

/* From policy_get's flat field, value array (n strings). False on a value no
 * library writes. */
bool rd_policy_from_pairs(rd_policy_t *p, const rd_str_t *pairs, size_t n);

/* {"queue", "paused", "shards", "shards_settling", "max_retries", "backoff": {...}, "lease_seconds",
 * "dead_ttl", "succeeded_ttl", "max_in_flight", "rate_limit": null | {...},
 * "dead_letter_rules": [...], "alert_url": null | "...", "message_ttl",
 * "on_expiry", "dead_letter_queue": null | "...", "group_max_in_flight",
 * "group_rate_limit": null | {...}, "fifo_groups", "lease_expiry",
 * "delay_seconds", "max_payload_bytes": null | n, "wait_seconds", "sqs",
 * "content_based_dedup", "created_at": null | ms, "updated_at": null | ms}:
 * the effective policy, defaults filled in; max_retries is a number or
 * "unlimited". */
void rd_policy_write_json(rd_jsonw_t *w, const rd_policy_t *p, const rd_policy_defaults_t *d,
                          const char *queue, size_t queue_len);

#endif
