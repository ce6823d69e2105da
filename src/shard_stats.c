/* shard_stats.c - a queue's stats summed over its shards
 * (include/retryd/shard_stats.h). One job per request: the shards are asked
 * one after the other, each answer folded into owned copies. */
#include "retryd/shard_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/shard_view.h"

typedef struct named {
    char *name;
    size_t len;
    long long value;
} named_t;

typedef struct job {
    rd_store_t *st;
    char *queue;
    size_t len;
    int top;
    int shard, nshards;
    bool learned;               /* the view was read after shard 0 said so */
    rd_queue_stats_t sum;       /* gauges; totals and top errors below */
    named_t *totals, *errors;
    size_t ntotals, nerrors;
    rd_store_stats_cb cb;
    void *arg;
} job_t;

/* Adds value to name's entry of the list (a new entry at the end). */
static void add_named(named_t **list, size_t *n, const rd_str_t *name, long long value)
{
    for (size_t i = 0; i < *n; i++)
        if ((*list)[i].len == name->len && memcmp((*list)[i].name, name->ptr, name->len) == 0) {
            (*list)[i].value += value;
            return;
        }
    *list = rd_realloc(*list, (*n + 1) * sizeof **list);
    (*list)[*n] = (named_t){ rd_strndup(name->ptr, name->len), name->len, value };
    (*n)++;
}

static void fold(job_t *j, const rd_queue_stats_t *s, bool first)
{
#define ADD(name) j->sum.name += s->name;
    RD_STATS_GAUGES(ADD)
#undef ADD
    if (first) {   /* the queue's own, from shard 0 */
        j->sum.paused = s->paused;
        j->sum.sqs = s->sqs;
        j->sum.shards = s->shards;
    } else {
        j->sum.paused -= s->paused;
        j->sum.sqs -= s->sqs;
        j->sum.shards -= s->shards;
    }
    for (size_t i = 0; i + 1 < s->totals_len; i += 2)
        if (s->totals[i].ptr) add_named(&j->totals, &j->ntotals, &s->totals[i], rd_str_number(&s->totals[i + 1]));
    for (size_t i = 0; i + 1 < s->top_errors_len; i += 2)
        if (s->top_errors[i].ptr)
            add_named(&j->errors, &j->nerrors, &s->top_errors[i], rd_str_number(&s->top_errors[i + 1]));
}

static int by_count(const void *a, const void *b)
{
    const named_t *x = a, *y = b;
    return x->value < y->value ? 1 : x->value > y->value ? -1 : 0;
}

static void job_free(job_t *j)
{
    for (size_t i = 0; i < j->ntotals; i++) rd_free(j->totals[i].name);
    for (size_t i = 0; i < j->nerrors; i++) rd_free(j->errors[i].name);
    rd_free(j->totals);
    rd_free(j->errors);
    rd_free(j->queue);
    rd_free(j);
}

/* The sum as one stats result: strings for the numbers, as a shard's. */
static void deliver(job_t *j)
{
    if (j->nerrors > 1) qsort(j->errors, j->nerrors, sizeof *j->errors, by_count);
    size_t nerr = j->nerrors < (size_t)(j->top > 0 ? j->top : 0) ? j->nerrors : (size_t)j->top;
    rd_str_t *totals = rd_calloc(2 * j->ntotals + 1, sizeof *totals);
    rd_str_t *errors = rd_calloc(2 * nerr + 1, sizeof *errors);
    char (*digits)[24] = rd_calloc(j->ntotals + nerr + 1, sizeof *digits);
    size_t d = 0;
    for (size_t i = 0; i < j->ntotals; i++, d++) {
        int n = snprintf(digits[d], sizeof digits[d], "%lld", j->totals[i].value);
        totals[2 * i] = (rd_str_t){ j->totals[i].name, j->totals[i].len };
        totals[2 * i + 1] = (rd_str_t){ digits[d], (size_t)n };
    }
    for (size_t i = 0; i < nerr; i++, d++) {
        int n = snprintf(digits[d], sizeof digits[d], "%lld", j->errors[i].value);
        errors[2 * i] = (rd_str_t){ j->errors[i].name, j->errors[i].len };
        errors[2 * i + 1] = (rd_str_t){ digits[d], (size_t)n };
    }
    rd_store_stats_result_t res = { .head = { .status = RD_STORE_OK }, .stats = j->sum };
    res.stats.totals = totals;
    res.stats.totals_len = 2 * j->ntotals;
    res.stats.top_errors = errors;
    res.stats.top_errors_len = 2 * nerr;
    j->cb(&res, j->arg);
    rd_free(totals);
    rd_free(errors);
    rd_free(digits);
    job_free(j);
}

static void on_stats(const rd_store_stats_result_t *res, void *arg);

static int ask(job_t *j)
{
    rd_store_queue_t q = { .name = j->queue, .len = j->len };
    rd_shard_view_t *v = rd_store_view(j->st, q);
    if (j->shard > 0) {
        if (v == NULL || j->shard >= v->n) return -1;
        q = rd_shard_view_at(v, q, j->shard);
    }
    return rd_store_stats(j->st, q, j->top, on_stats, j);
}

static void fail(job_t *j, const rd_store_head_t *head)
{
    rd_store_stats_result_t res = { .head = *head };
    j->cb(&res, j->arg);
    job_free(j);
}

static void on_view_read(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    rd_store_queue_t q = { .name = j->queue, .len = j->len };
    if (res->head.status == RD_STORE_OK)
        rd_shard_views_learn(rd_store_views(j->st), q, res->strings, res->count,
                             rd_store_now_ms(j->st));
    rd_shard_view_t *v = rd_store_view(j->st, q);
    j->nshards = v ? v->n : 1;
    j->shard = 1;
    if (j->shard >= j->nshards) {
        deliver(j);
        return;
    }
    if (ask(j) != 0) {
        rd_store_head_t head = { .status = RD_STORE_UNAVAILABLE };
        fail(j, &head);
    }
}

static void on_stats(const rd_store_stats_result_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail(j, &res->head);
        return;
    }
    fold(j, &res->stats, j->shard == 0);
    if (j->shard == 0 && res->stats.shards > j->nshards && !j->learned) {
        /* Shard 0 says there are more: read the layout, then ask them. */
        j->learned = true;
        rd_store_queue_t q = { .name = j->queue, .len = j->len };
        if (rd_store_policy_pairs(j->st, q, on_view_read, j) != 0) deliver(j);
        return;
    }
    if (++j->shard >= j->nshards) {
        deliver(j);
        return;
    }
    if (ask(j) != 0) {
        rd_store_head_t head = { .status = RD_STORE_UNAVAILABLE };
        fail(j, &head);
    }
}

int rd_shard_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg)
{
    job_t *j = rd_calloc(1, sizeof *j);
    j->st = st;
    j->queue = rd_strndup(q.name, q.len);
    j->len = q.len;
    j->top = top;
    j->cb = cb;
    j->arg = arg;
    rd_shard_view_t *v = rd_store_view(st, q);
    j->nshards = v ? v->n : 1;
    if (ask(j) != 0) {
        job_free(j);
        return -1;
    }
    return 0;
}

/* rd_shard_series: each shard's rings, summed bucket by bucket. The first
 * shard's answer sets the buckets; a later one that started a bucket later
 * (the minute turned between the calls) is added where its buckets fall. */
typedef struct series_job {
    rd_store_t *st;
    char *queue;
    size_t len;
    char *resolution;
    rd_shard_view_t view;
    int shard;
    rd_store_series_t sum;      /* values owned */
    rd_store_series_cb cb;
    void *arg;
} series_job_t;

static void series_end(series_job_t *j, const rd_store_series_t *res)
{
    j->cb(res, j->arg);
    rd_free(j->sum.values);
    rd_free(j->resolution);
    rd_free(j->queue);
    rd_free(j);
}

static void series_fail(series_job_t *j, rd_store_status_t status)
{
    rd_store_series_t res = { .head = { .status = status } };
    series_end(j, &res);
}

static void on_series(const rd_store_series_t *res, void *arg);

static int ask_series(series_job_t *j)
{
    rd_store_queue_t q = rd_shard_view_at(j->view.n > 1 ? &j->view : NULL,
                                          (rd_store_queue_t){ .name = j->queue, .len = j->len },
                                          j->shard);
    return rd_store_series(j->st, q, j->resolution, on_series, j);
}

static void add_series(series_job_t *j, const rd_store_series_t *res)
{
    if (j->sum.values == NULL) {
        j->sum = *res;
        j->sum.values = rd_calloc(RD_SERIES_COUNT * (res->len ? res->len : 1), sizeof *res->values);
        memcpy(j->sum.values, res->values, RD_SERIES_COUNT * res->len * sizeof *res->values);
        return;
    }
    if (res->step_ms != j->sum.step_ms || res->step_ms <= 0) return;
    long long shift = (res->start_ms - j->sum.start_ms) / res->step_ms;
    for (size_t i = 0; i < RD_SERIES_COUNT; i++)
        for (size_t b = 0; b < res->len; b++) {
            long long at = (long long)b + shift;
            if (at >= 0 && at < (long long)j->sum.len)
                j->sum.values[i * j->sum.len + (size_t)at] += res->values[i * res->len + b];
        }
}

static void on_series(const rd_store_series_t *res, void *arg)
{
    series_job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        series_end(j, res);
        return;
    }
    add_series(j, res);
    if (++j->shard >= j->view.n) {
        series_end(j, &j->sum);
        return;
    }
    if (ask_series(j) != 0) series_fail(j, RD_STORE_UNAVAILABLE);
}

int rd_shard_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg)
{
    series_job_t *j = rd_calloc(1, sizeof *j);
    *j = (series_job_t){ .st = st, .queue = rd_strndup(q.name, q.len), .len = q.len,
                         .resolution = rd_strdup(resolution), .cb = cb, .arg = arg };
    j->sum.head.status = RD_STORE_OK;
    rd_shard_view_t *v = rd_store_view(st, q);
    j->view = v ? *v : (rd_shard_view_t){ .n = 1 };
    if (ask_series(j) != 0) {
        rd_free(j->resolution);
        rd_free(j->queue);
        rd_free(j);
        return -1;
    }
    return 0;
}
