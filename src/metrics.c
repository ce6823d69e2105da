/* metrics.c - histograms and the Prometheus text exposition. */
#include "retryd/metrics.h"


#include <stddef.h>
#include <stdio.h>
#include <string.h>

const long long rd_delay_bucket_bounds[RD_DELAY_BUCKETS] = { 1,   2,   4,    8,    16,   32,  64,
                                                             128, 256, 512, 1024, 2048, 3600 };

void rd_histogram_init(rd_histogram_t *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nbounds = nbounds < RD_HISTOGRAM_MAX_BOUNDS ? nbounds : RD_HISTOGRAM_MAX_BOUNDS;
}

void rd_histogram_observe(rd_histogram_t *h, double value)
{
    size_t i = 0;
    while (i < h->nbounds && value > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += value;
    h->count++;
}

static bool pair_is(const rd_str_t *name, const char *lit)
{
    return name->len == strlen(lit) && memcmp(name->ptr, lit, name->len) == 0;
}

static long long to_ll(const rd_str_t *v)
{
    return rd_str_to_ll(v->ptr, v->len);
}

/* Parses a rule counter's name (stats.h): true with *index and *dead (false: retried). */
static bool rule_counter(const char *name, size_t len, size_t *index, bool *dead)
{
    if (len < 7 || memcmp(name, "rule_", 5) != 0) return false;
    size_t i = 5, n = 0;
    while (i < len && i < 7 && name[i] >= '0' && name[i] <= '9')
        n = n * 10 + (size_t)(name[i++] - '0');
    if (i == 5 || i >= len || name[i] != '_' || n >= RD_STATS_RULES_MAX) return false;
    if (i == 7 && name[5] == '0') return false;
    const char *rest = name + i + 1;
    size_t left = len - i - 1;
    if (left == 7 && memcmp(rest, "retried", 7) == 0) *dead = false;
    else if (left == 4 && memcmp(rest, "dead", 4) == 0) *dead = true;
    else return false;
    *index = n;
    return true;
}

void rd_metrics_from_stats(rd_queue_metrics_t *m, const rd_queue_stats_t *st)
{
    char *name = m->name;
    size_t len = m->name_len;
    memset(m, 0, sizeof *m);
    m->name = name;
    m->name_len = len;
    m->ok = true;
    m->ready = st->ready;
    m->scheduled = st->scheduled;
    m->processing = st->processing;
    m->succeeded_now = st->succeeded;
    m->dead_now = st->dead;
    m->dead_last_24h = st->dead_last_24h;
    m->paused = st->paused;
    m->groups = st->groups;
    m->sqs = st->sqs;
    for (size_t i = 0; i + 1 < st->totals_len; i += 2) {
        const rd_str_t *k = &st->totals[i], *v = &st->totals[i + 1];
#define COUNTER(f, help) if (pair_is(k, #f)) { m->f = to_ll(v); continue; }
        RD_STATS_COUNTERS(COUNTER)
#undef COUNTER
        size_t rule;
        bool dead;
        if (rule_counter(k->ptr, k->len, &rule, &dead)) {
            if (dead) m->rule_dead[rule] = to_ll(v);
            else m->rule_retried[rule] = to_ll(v);
            m->rules_seen |= 1UL << rule;
            continue;
        }
        if (pair_is(k, "delay_sum_ms")) {
            m->delay_sum_ms = to_ll(v);
            continue;
        }
        if (pair_is(k, "delay_le_inf")) {
            m->delay_buckets[RD_DELAY_BUCKETS] = to_ll(v);
            continue;
        }
        for (size_t b = 0; b < RD_DELAY_BUCKETS; b++) {
            char field[32];
            snprintf(field, sizeof field, "delay_le_%lld", rd_delay_bucket_bounds[b]);
            if (pair_is(k, field)) {
                m->delay_buckets[b] = to_ll(v);
                break;
            }
        }
    }
}

/* Label values escape backslash, double quote and newline (text format 0.0.4). */
static void put_label(rd_buf_t *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\') rd_buf_puts(out, "\\\\");
        else if (s[i] == '"') rd_buf_puts(out, "\\\"");
        else if (s[i] == '\n') rd_buf_puts(out, "\\n");
        else rd_buf_putc(out, s[i]);
    }
}

static void family(rd_buf_t *out, const char *name, const char *type, const char *help)
{
    rd_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void queue_sample(rd_buf_t *out, const char *name, const rd_queue_metrics_t *q,
                         const char *extra_label, long long value)
{
    rd_buf_printf(out, "%s{queue=\"", name);
    put_label(out, q->name, q->name_len);
    rd_buf_printf(out, "\"%s} %lld\n", extra_label ? extra_label : "", value);
}

static const struct {
    const char *name;
    const char *help;
    size_t offset;
} counters[] = {
#define C(f, h) { "retryd_" #f "_total", h, offsetof(rd_queue_metrics_t, f) },
    RD_STATS_COUNTERS(C)
#undef C
};

static const struct {
    const char *state;
    size_t offset;
} depths[] = {
    { "ready", offsetof(rd_queue_metrics_t, ready) },
    { "scheduled", offsetof(rd_queue_metrics_t, scheduled) },
    { "processing", offsetof(rd_queue_metrics_t, processing) },
    { "succeeded", offsetof(rd_queue_metrics_t, succeeded_now) },
    { "dead", offsetof(rd_queue_metrics_t, dead_now) },
};

#define FIELD(q, off) (*(const long long *)(const void *)((const char *)(q) + (off)))

void rd_metrics_render(rd_buf_t *out, const rd_queue_metrics_t *qs, size_t n,
                       const rd_histogram_t *rtt, size_t waiters)
{
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        family(out, counters[c].name, "counter", counters[c].help);
        for (size_t i = 0; i < n; i++)
            if (qs[i].ok) queue_sample(out, counters[c].name, &qs[i], NULL,
                                       FIELD(&qs[i], counters[c].offset));
    }

    family(out, "retryd_queue_messages", "gauge", "Messages in the queue now, by state.");
    for (size_t i = 0; i < n; i++) {
        if (!qs[i].ok) continue;
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
            char label[48];
            snprintf(label, sizeof label, ",state=\"%s\"", depths[d].state);
            queue_sample(out, "retryd_queue_messages", &qs[i], label,
                         FIELD(&qs[i], depths[d].offset));
        }
    }

    family(out, "retryd_dead_last_24h", "gauge", "Dead letters that died in the last 24 hours.");
    for (size_t i = 0; i < n; i++)
        if (qs[i].ok) queue_sample(out, "retryd_dead_last_24h", &qs[i], NULL, qs[i].dead_last_24h);

    family(out, "retryd_queue_paused", "gauge", "1 while the queue is paused (claims lease nothing).");
    for (size_t i = 0; i < n; i++)
        if (qs[i].ok) queue_sample(out, "retryd_queue_paused", &qs[i], NULL, qs[i].paused);

    family(out, "retryd_queue_groups", "gauge",
           "Fairness groups with a pending or processing message (ungrouped messages not counted).");
    for (size_t i = 0; i < n; i++)
        if (qs[i].ok) queue_sample(out, "retryd_queue_groups", &qs[i], NULL, qs[i].groups);

    family(out, "retryd_retry_delay_seconds", "histogram",
           "Delay before each scheduled retry (backoff or retry_after_seconds).");
    for (size_t i = 0; i < n; i++) {
        if (!qs[i].ok) continue;
        long long cumulative = 0;
        for (size_t b = 0; b <= RD_DELAY_BUCKETS; b++) {
            cumulative += qs[i].delay_buckets[b];
            char label[48];
            if (b < RD_DELAY_BUCKETS)
                snprintf(label, sizeof label, ",le=\"%lld\"", rd_delay_bucket_bounds[b]);
            else
                snprintf(label, sizeof label, ",le=\"+Inf\"");
            queue_sample(out, "retryd_retry_delay_seconds_bucket", &qs[i], label, cumulative);
        }
        rd_buf_puts(out, "retryd_retry_delay_seconds_sum{queue=\"");
        put_label(out, qs[i].name, qs[i].name_len);
        rd_buf_printf(out, "\"} %.3f\n", (double)qs[i].delay_sum_ms / 1000.0);
        queue_sample(out, "retryd_retry_delay_seconds_count", &qs[i], NULL, cumulative);
    }

    family(out, "retryd_dead_letter_rule_total", "counter",
           "Failures a dead-letter rule decided, by rule position and outcome (retried: "
           "scheduled again; dead: sent dead).");
    for (size_t i = 0; i < n; i++) {
        if (!qs[i].ok) continue;
        for (size_t r = 0; r < RD_STATS_RULES_MAX; r++) {
            if (!(qs[i].rules_seen & (1UL << r))) continue;
            char label[48];
            snprintf(label, sizeof label, ",rule=\"%zu\",outcome=\"retried\"", r);
            queue_sample(out, "retryd_dead_letter_rule_total", &qs[i], label, qs[i].rule_retried[r]);
            snprintf(label, sizeof label, ",rule=\"%zu\",outcome=\"dead\"", r);
            queue_sample(out, "retryd_dead_letter_rule_total", &qs[i], label, qs[i].rule_dead[r]);
        }
    }

    family(out, "retryd_redis_rtt_seconds", "histogram",
           "Round-trip time of this process's Redis commands.");
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= rtt->nbounds; b++) {
        cumulative += rtt->counts[b];
        if (b < rtt->nbounds)
            rd_buf_printf(out, "retryd_redis_rtt_seconds_bucket{le=\"%g\"} %llu\n",
                          rtt->bounds[b], (unsigned long long)cumulative);
        else
            rd_buf_printf(out, "retryd_redis_rtt_seconds_bucket{le=\"+Inf\"} %llu\n",
                          (unsigned long long)cumulative);
    }
    rd_buf_printf(out, "retryd_redis_rtt_seconds_sum %.6f\n", rtt->sum);
    rd_buf_printf(out, "retryd_redis_rtt_seconds_count %llu\n", (unsigned long long)rtt->count);

    family(out, "retryd_waiting_claims", "gauge", "Long-poll claims parked in this process.");
    rd_buf_printf(out, "retryd_waiting_claims %zu\n", waiters);
}

void rd_metrics_render_registry(rd_buf_t *out, long long registered, long long omitted)
{
    family(out, "retryd_registered_queues", "gauge", "Queues in the registry.");
    rd_buf_printf(out, "retryd_registered_queues %lld\n", registered);
    family(out, "retryd_queue_series_omitted", "gauge",
           "Registered queues without per-queue series in this exposition (at most 1000 "
           "queues, the first by name, are exported).");
    rd_buf_printf(out, "retryd_queue_series_omitted %lld\n", omitted);
}

void rd_metrics_render_snapshot_age(rd_buf_t *out, long long age_ms)
{
    family(out, "retryd_queue_metrics_age_seconds", "gauge",
           "Age of the snapshot the per-queue series come from (read again once older than "
           "5 s, shared by every scrape).");
    rd_buf_printf(out, "retryd_queue_metrics_age_seconds %.3f\n", age_ms / 1000.0);
}
