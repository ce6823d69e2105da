/* stats.h - a queue's statistics as the library's `stats` function answers
 * them, every name spelled once for C: store.c parses the reply with these
 * lists, metrics.c exports them and api.c lists them (GET /queues/{q}/stats).
 * The Lua side writes them (HINCRBY on the `stats` hash, lua/). Pure data. */
#ifndef RETRYD_STATS_H
#define RETRYD_STATS_H

#include <stddef.h>

#include "retryd/message.h"

/* The lifetime counters GET /queues/{q}/stats always lists and /metrics
 * exports as retryd_<name>_total: X(name, help). */
#define RD_STATS_COUNTERS(X)                                                            \
    X(enqueued, "Messages enqueued.")                                                   \
    X(claimed, "Messages claimed (each lease counts).")                                 \
    X(succeeded, "Messages that succeeded.")                                            \
    X(failed, "Failures reported or caused by an expired lease.")                       \
    X(retried, "Failures scheduled for a retry.")                                       \
    X(dead, "Messages that went dead (exhausted, not retryable, or killed).")           \
    X(replayed, "Dead letters replayed.")                                               \
    X(snoozed, "Messages snoozed: back to pending without an attempt counted.")         \
    X(lease_expired, "Leases that expired before the message was settled.")              \
    X(held_paused, "Claims that leased less because the queue was paused.")             \
    X(held_cap, "Claims that leased less because of the queue's max_in_flight.")        \
    X(held_rate, "Claims that leased less because of the queue's rate_limit.")            \
    X(held_group_cap, "Times a claim passed over a group at the queue's group_max_in_flight.") \
    X(held_group_rate, "Times a claim passed over a group without a token of its "      \
                       "group_rate_limit.")                                              \
    X(expired, "Pending messages past their expires_at, gone dead or deleted.")        \
    X(dead_lettered, "Deaths moved to the queue's dead_letter_queue.")

/* The other counters of the hash, which GET /queues/{q}/stats lists when the
 * hash has them: X(name). */
#define RD_STATS_MORE_COUNTERS(X) \
    X(expired_dead) X(expired_succeeded) X(deleted) X(purged) X(released) X(orphans_removed) \
    X(alerts_delivered) X(alerts_failed) X(alerts_claimed) X(alerts_dropped) \
    X(redriven) X(redriven_in)

/* The dead-letter rules' counters of the hash (docs/reference.md "Recovery rules"): rule_<i>_retried
 * (the rule scheduled the message again) and rule_<i>_dead (it went dead by
 * the rule: a "dead" rule, or a "retry" rule past its max_times), i the
 * rule's 0-based position, below RD_STATS_RULES_MAX. */
#define RD_STATS_RULES_MAX 20

/* The gauges of the `stats` reply (messages in each state now, deaths in the
 * last 24 h, 1 while the queue is paused, letters being redriven, fairness
 * groups with a pending or processing message, 1 for a queue made through
 * the SQS endpoint): X(name). A library without one answers 0 for it. */
#define RD_STATS_GAUGES(X) \
    X(pending) X(ready) X(scheduled) X(processing) X(succeeded) X(dead) X(dead_last_24h) \
    X(paused) X(redriving) X(groups) X(sqs) X(shards)

/* The `stats` function's answer for one queue. */
typedef struct rd_queue_stats {
#define RD_STATS_GAUGE_FIELD(name) long long name;
    RD_STATS_GAUGES(RD_STATS_GAUGE_FIELD)
#undef RD_STATS_GAUGE_FIELD
    rd_str_t *totals;         /* name, value, name, value, ... (the stats hash) */
    size_t totals_len;        /* number of rd_str_t, twice the number of pairs */
    rd_str_t *top_errors;     /* error, count, ... highest first */
    size_t top_errors_len;
} rd_queue_stats_t;

#endif
