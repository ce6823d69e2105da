/* metrics.h - histograms and the Prometheus text exposition of GET /metrics.
 * Pure: rendering takes plain numbers and writes text. */
#ifndef RETRYD_METRICS_H
#define RETRYD_METRICS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "retryd/buf.h"
#include "retryd/message.h"
#include "retryd/stats.h"

enum { RD_HISTOGRAM_MAX_BOUNDS = 16 };

typedef struct rd_histogram {
    size_t nbounds;
    const double *bounds;                         /* upper bounds, ascending, static */
    uint64_t counts[RD_HISTOGRAM_MAX_BOUNDS + 1]; /* per bucket (not cumulative); last: +Inf */
    double sum;
    uint64_t count;
} rd_histogram_t;

void rd_histogram_init(rd_histogram_t *h, const double *bounds, size_t nbounds);
void rd_histogram_observe(rd_histogram_t *h, double value);

/* The retry delay buckets the Lua library counts (seconds; last is +Inf). */
enum { RD_DELAY_BUCKETS = 13 };
extern const long long rd_delay_bucket_bounds[RD_DELAY_BUCKETS];

/* GET /metrics exports per-queue series for at most this many queues (the
 * first by name), so a scrape reads a bounded number of stats. */
enum { RD_METRICS_MAX_QUEUES = 1000 };

/* GET /metrics serves the per-queue series from one snapshot that all
 * scrapes share, read again when older than this (docs/design.md "Listing"). */
enum { RD_METRICS_SNAPSHOT_MS = 5000 };

/* One queue's numbers, copied out of a `stats` reply. */
typedef struct rd_queue_metrics {
    char *name;                 /* owned */
    size_t name_len;
    bool ok;                    /* false when its stats could not be read */
#define RD_METRICS_COUNTER_FIELD(name, help) long long name;
    RD_STATS_COUNTERS(RD_METRICS_COUNTER_FIELD)       /* lifetime counters */
#undef RD_METRICS_COUNTER_FIELD
    long long ready, scheduled, processing, succeeded_now, dead_now, dead_last_24h;
    long long paused;           /* 1 while the queue is paused (docs/reference.md "Pause, caps and rate limits") */
    long long groups;           /* fairness groups with messages (docs/reference.md "Fairness groups") */
    long long sqs;              /* 1 for a queue made through the SQS endpoint (docs/sqs.md) */
    long long delay_buckets[RD_DELAY_BUCKETS + 1];  /* per bucket; last: +Inf */
    long long delay_sum_ms;
    /* The dead-letter rules' counters by position (docs/reference.md "Recovery rules"): bit i of
     * rules_seen says the stats hash has rule i's (rule_<i>_retried, _dead). */
    long long rule_retried[RD_STATS_RULES_MAX], rule_dead[RD_STATS_RULES_MAX];
    unsigned long rules_seen;
} rd_queue_metrics_t;

/* Fills m's numbers from st (name is left alone). */
void rd_metrics_from_stats(rd_queue_metrics_t *m, const rd_queue_stats_t *st);

/* Appends the exposition (text format 0.0.4) of every family to out: the
 * per-queue counters and gauges, the retry delay histogram, the Redis
 * round-trip histogram rtt, and the number of parked long-poll claims. */
void rd_metrics_render(rd_buf_t *out, const rd_queue_metrics_t *qs, size_t n,
                       const rd_histogram_t *rtt, size_t waiters);

/* Appends the registry's gauges: how many queues are registered, and how many
 * of them the per-queue series leave out (RD_METRICS_MAX_QUEUES, or stats
 * that could not be read). */
void rd_metrics_render_registry(rd_buf_t *out, long long registered, long long omitted);

/* Appends the age of the snapshot the per-queue series come from, in seconds. */
void rd_metrics_render_snapshot_age(rd_buf_t *out, long long age_ms);

#endif
