/* test_metrics.c - unit tests of metrics.c: the histogram, rd_metrics_from_stats
 * and the Prometheus text exposition, which is parsed back here the way a
 * scraper would (text format 0.0.4) and checked line by line. No network. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/metrics.h"
#include "retryd/store.h"

/* The parser below reports a violation with PFAIL. Normally that fails the
 * test; inside expect_rejected() it jumps back instead, so the negative tests
 * can show that the parser catches what it should. */
static bool g_soft;
static jmp_buf g_soft_jmp;
static char g_soft_why[256];

static void soft_note(const char *f, ...) __attribute__((format(printf, 1, 2)));
static void soft_note(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(g_soft_why, sizeof g_soft_why, f, ap);
    va_end(ap);
}

#define PFAIL(...)                                                            \
    do {                                                                      \
        if (g_soft) {                                                         \
            soft_note(__VA_ARGS__);                                               \
            longjmp(g_soft_jmp, 1);                                           \
        }                                                                     \
        fail_msg(__VA_ARGS__);                                                \
    } while (0)
#define PCHECK(c) do { if (!(c)) PFAIL("check failed: %s", #c); } while (0)
#define PCHECK_EQ(a, b) PCHECK((a) == (b))

/* ------------------------------------------------------------------------ */
/* A small parser of the text format                                        */
/* ------------------------------------------------------------------------ */

enum { MAX_FAMILIES = 64, MAX_SAMPLES = 1024, MAX_LABELS = 8 };

typedef struct label {
    char name[64];
    char value[512];   /* unescaped */
} label_t;

typedef struct sample {
    char name[128];
    char family[128];
    label_t labels[MAX_LABELS];
    size_t nlabels;
    double value;
} sample_t;

typedef struct family {
    char name[128];
    char type[32];
    int helps, types;
    bool had_samples, closed;
} family_t;

typedef struct exposition {
    family_t families[MAX_FAMILIES];
    size_t nfamilies;
    sample_t samples[MAX_SAMPLES];
    size_t nsamples;
} exposition_t;

static bool name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

/* Reads a metric name at *p into out (fails the test when invalid). */
static void read_metric_name(const char **p, char *out, size_t cap, const char *line)
{
    const char *s = *p;
    if (!name_start(*s)) PFAIL("bad metric name in line: %s", line);
    size_t n = 0;
    while (name_char(*s)) {
        if (n + 1 >= cap) PFAIL("metric name too long: %s", line);
        out[n++] = *s++;
    }
    out[n] = '\0';
    *p = s;
}

static family_t *find_family(exposition_t *e, const char *name)
{
    for (size_t i = 0; i < e->nfamilies; i++)
        if (strcmp(e->families[i].name, name) == 0) return &e->families[i];
    return NULL;
}

static family_t *get_family(exposition_t *e, const char *name)
{
    family_t *f = find_family(e, name);
    if (f) return f;
    PCHECK(e->nfamilies < MAX_FAMILIES);
    f = &e->families[e->nfamilies++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The family a sample name belongs to: a histogram's _bucket, _sum and _count
 * belong to the histogram's family; anything else is its own family. */
static void family_of(exposition_t *e, const char *sample, char *out, size_t cap)
{
    static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
    for (size_t i = 0; i < 3; i++) {
        if (!ends_with(sample, suffixes[i])) continue;
        size_t n = strlen(sample) - strlen(suffixes[i]);
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)n, sample);
        family_t *f = find_family(e, base);
        if (f && (strcmp(f->type, "histogram") == 0 || strcmp(f->type, "summary") == 0)) {
            snprintf(out, cap, "%s", base);
            return;
        }
    }
    size_t n = strlen(sample) < cap - 1 ? strlen(sample) : cap - 1;
    memmove(out, sample, n);
    out[n] = '\0';
}

/* Parses one label value (after the opening quote), unescaping \\ \" \n;
 * any other escape or a raw newline fails the test. */
static void read_label_value(const char **p, char *out, size_t cap, const char *line)
{
    const char *s = *p;
    size_t n = 0;
    for (;;) {
        char c = *s++;
        if (c == '\0' || c == '\n') PFAIL("unterminated label value: %s", line);
        if (c == '"') break;
        if (c == '\\') {
            char d = *s++;
            if (d == '\\') c = '\\';
            else if (d == '"') c = '"';
            else if (d == 'n') c = '\n';
            else PFAIL("bad escape \\%c in label value: %s", d, line);
        }
        if (n + 1 >= cap) PFAIL("label value too long: %s", line);
        out[n++] = c;
    }
    out[n] = '\0';
    *p = s;
}

static double read_value(const char *s, const char *line)
{
    if (strcmp(s, "+Inf") == 0) return INFINITY;
    if (strcmp(s, "-Inf") == 0) return -INFINITY;
    if (strcmp(s, "NaN") == 0) return NAN;
    char *end;
    double v = strtod(s, &end);
    if (end == s) PFAIL("bad sample value: %s", line);
    /* an optional timestamp: an integer after one space */
    if (*end == ' ') {
        const char *t = end + 1;
        if (*t == '-') t++;
        if (*t == '\0') PFAIL("empty timestamp: %s", line);
        while (*t >= '0' && *t <= '9') t++;
        end = (char *)t;
    }
    if (*end != '\0') PFAIL("trailing bytes after value: %s", line);
    return v;
}

static void parse_sample(exposition_t *e, const char *line)
{
    PCHECK(e->nsamples < MAX_SAMPLES);
    sample_t *s = &e->samples[e->nsamples++];
    memset(s, 0, sizeof *s);
    const char *p = line;
    read_metric_name(&p, s->name, sizeof s->name, line);
    if (*p == '{') {
        p++;
        while (*p != '}') {
            if (s->nlabels >= MAX_LABELS) PFAIL("too many labels: %s", line);
            label_t *l = &s->labels[s->nlabels++];
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_'))
                PFAIL("bad label name: %s", line);
            size_t n = 0;
            while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                   (*p >= '0' && *p <= '9')) {
                if (n + 1 >= sizeof l->name) PFAIL("label name too long: %s", line);
                l->name[n++] = *p++;
            }
            l->name[n] = '\0';
            if (strncmp(l->name, "__", 2) == 0) PFAIL("reserved label name: %s", line);
            for (size_t i = 0; i + 1 < s->nlabels; i++)
                if (strcmp(s->labels[i].name, l->name) == 0)
                    PFAIL("duplicate label %s: %s", l->name, line);
            if (p[0] != '=' || p[1] != '"') PFAIL("expected =\" after label name: %s", line);
            p += 2;
            read_label_value(&p, l->value, sizeof l->value, line);
            if (*p == ',') p++;
            else if (*p != '}') PFAIL("expected , or } after label: %s", line);
        }
        p++;
    }
    if (*p != ' ' && *p != '\t') PFAIL("expected a blank before the value: %s", line);
    while (*p == ' ' || *p == '\t') p++;
    s->value = read_value(p, line);
}

/* Parses text into e, checking every rule that does not need the whole
 * output: comment shapes, names, label syntax and escapes, one HELP and one
 * TYPE per family before its first sample, contiguous families. */
static void parse_exposition(exposition_t *e, const char *text, size_t len)
{
    memset(e, 0, sizeof *e);
    PCHECK(len > 0);
    PCHECK_EQ(text[len - 1], '\n');   /* the last line ends with a newline */
    PCHECK_EQ(strlen(text), len);     /* no NUL in the output */
    char current[128] = "";
    const char *p = text;
    while (p < text + len) {
        const char *eol = memchr(p, '\n', (size_t)(text + len - p));
        if (eol == NULL) {
            PFAIL("last line without a newline");
            return;
        }
        char line[2048];
        size_t n = (size_t)(eol - p);
        if (n >= sizeof line) {
            PFAIL("line of %zu bytes", n);
            return;
        }
        memcpy(line, p, n);
        line[n] = '\0';
        p = eol + 1;
        if (n == 0) continue;
        if (line[0] == '#') {
            const char *q = line + 1;
            bool help = strncmp(q, " HELP ", 6) == 0, type = strncmp(q, " TYPE ", 6) == 0;
            if (!help && !type) continue;   /* a plain comment */
            q += 6;
            char name[128];
            read_metric_name(&q, name, sizeof name, line);
            if (*q != ' ') PFAIL("expected a space after the name: %s", line);
            q++;
            family_t *f = get_family(e, name);
            if (f->had_samples)
                PFAIL("%s after samples of %s: %s", help ? "HELP" : "TYPE", name, line);
            if (help) {
                f->helps++;
                if (*q == '\0') PFAIL("empty HELP text: %s", line);
            } else {
                f->types++;
                if (strcmp(q, "counter") != 0 && strcmp(q, "gauge") != 0 &&
                    strcmp(q, "histogram") != 0 && strcmp(q, "summary") != 0 &&
                    strcmp(q, "untyped") != 0)
                    PFAIL("bad TYPE: %s", line);
                snprintf(f->type, sizeof f->type, "%s", q);
            }
            if (f->helps > 1 || f->types > 1) PFAIL("second %s line for %s", help ? "HELP" : "TYPE", name);
            continue;
        }
        parse_sample(e, line);
        sample_t *s = &e->samples[e->nsamples - 1];
        family_of(e, s->name, s->family, sizeof s->family);
        family_t *f = find_family(e, s->family);
        if (f == NULL || f->helps != 1 || f->types != 1)
            PFAIL("sample of %s before its HELP and TYPE: %s", s->family, line);
        if (f->closed) PFAIL("samples of %s are not contiguous: %s", s->family, line);
        if (strcmp(current, s->family) != 0) {
            family_t *prev = current[0] ? find_family(e, current) : NULL;
            if (prev) prev->closed = true;
            snprintf(current, sizeof current, "%s", s->family);
        }
        f->had_samples = true;
    }
}

static const char *label(const sample_t *s, const char *name)
{
    for (size_t i = 0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0) return s->labels[i].value;
    return NULL;
}

/* A sample by name and queue label (queue NULL: no queue label), or NULL.
 * extra_name/extra_value pick one more label (NULL: ignored). */
static const sample_t *find_sample(const exposition_t *e, const char *name, const char *queue,
                                   const char *extra_name, const char *extra_value)
{
    for (size_t i = 0; i < e->nsamples; i++) {
        const sample_t *s = &e->samples[i];
        if (strcmp(s->name, name) != 0) continue;
        const char *q = label(s, "queue");
        if (queue ? (q == NULL || strcmp(q, queue) != 0) : q != NULL) continue;
        if (extra_name) {
            const char *v = label(s, extra_name);
            if (v == NULL || strcmp(v, extra_value) != 0) continue;
        }
        return s;
    }
    return NULL;
}

static double sample_value(const exposition_t *e, const char *name, const char *queue,
                           const char *extra_name, const char *extra_value)
{
    const sample_t *s = find_sample(e, name, queue, extra_name, extra_value);
    if (s == NULL)
        PFAIL("no sample %s{queue=%s%s%s}", name, queue ? queue : "(none)",
                 extra_name ? "," : "", extra_name ? extra_value : "");
    return s->value;
}

/* Label set of s without `le`, as a comparable string. */
static void series_key(const sample_t *s, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < s->nlabels; i++) {
        if (strcmp(s->labels[i].name, "le") == 0) continue;
        n += (size_t)snprintf(out + n, cap - n, "%s=%s\x1f", s->labels[i].name, s->labels[i].value);
        if (n >= cap) PFAIL("series key too long");
    }
}

/* Whole-output rules: counters end in _total; every histogram series has
 * ascending le buckets ending at +Inf, cumulative, +Inf == _count, and _sum.
 * Returns the number of histogram series checked. */
static size_t check_families(const exposition_t *e)
{
    size_t series_checked = 0;
    for (size_t f = 0; f < e->nfamilies; f++) {
        const family_t *fam = &e->families[f];
        PCHECK_EQ(fam->helps, 1);
        PCHECK_EQ(fam->types, 1);
        if (strcmp(fam->type, "counter") == 0 && !ends_with(fam->name, "_total"))
            PFAIL("counter %s does not end in _total", fam->name);
        if (strcmp(fam->type, "histogram") != 0) {
            for (size_t i = 0; i < e->nsamples; i++)
                if (strcmp(e->samples[i].family, fam->name) == 0 &&
                    strcmp(e->samples[i].name, fam->name) != 0)
                    PFAIL("sample %s in non-histogram family %s", e->samples[i].name,
                             fam->name);
            continue;
        }
        char bucket[160], sum[160], count[160];
        snprintf(bucket, sizeof bucket, "%s_bucket", fam->name);
        snprintf(sum, sizeof sum, "%s_sum", fam->name);
        snprintf(count, sizeof count, "%s_count", fam->name);
        /* every series (label set without le) that has buckets */
        for (size_t i = 0; i < e->nsamples; i++) {
            const sample_t *s = &e->samples[i];
            if (strcmp(s->family, fam->name) != 0) continue;
            if (strcmp(s->name, bucket) != 0 && strcmp(s->name, sum) != 0 &&
                strcmp(s->name, count) != 0)
                PFAIL("histogram %s has a sample %s", fam->name, s->name);
            if (strcmp(s->name, bucket) != 0) continue;
            char key[1024];
            series_key(s, key, sizeof key);
            /* only handle a series at its first bucket */
            bool first = true;
            for (size_t j = 0; j < i && first; j++) {
                char k2[1024];
                if (strcmp(e->samples[j].name, bucket) != 0) continue;
                series_key(&e->samples[j], k2, sizeof k2);
                if (strcmp(k2, key) == 0) first = false;
            }
            if (!first) continue;
            series_checked++;
            double prev_le = -INFINITY, prev_v = -1, inf_v = -1;
            bool saw_inf = false, saw_sum = false, saw_count = false;
            double count_v = -1;
            size_t buckets = 0;
            for (size_t j = i; j < e->nsamples; j++) {
                const sample_t *t = &e->samples[j];
                char k2[1024];
                series_key(t, k2, sizeof k2);
                if (strcmp(k2, key) != 0) continue;
                if (strcmp(t->name, bucket) == 0) {
                    const char *le = label(t, "le");
                    if (le == NULL) PFAIL("%s without le", bucket);
                    if (saw_inf) PFAIL("%s bucket after le=\"+Inf\"", fam->name);
                    double lev;
                    if (strcmp(le, "+Inf") == 0) {
                        lev = INFINITY;
                        saw_inf = true;
                        inf_v = t->value;
                    } else {
                        char *end;
                        lev = strtod(le, &end);
                        if (end == le || *end != '\0') PFAIL("le=\"%s\" is not a number", le);
                    }
                    if (!(lev > prev_le)) PFAIL("%s: le=\"%s\" not ascending", fam->name, le);
                    if (t->value < prev_v) PFAIL("%s: bucket le=\"%s\" decreases", fam->name, le);
                    if (t->value != floor(t->value) || t->value < 0)
                        PFAIL("%s: bucket count %g not a count", fam->name, t->value);
                    prev_le = lev;
                    prev_v = t->value;
                    buckets++;
                } else if (strcmp(t->name, sum) == 0) {
                    if (saw_sum) PFAIL("two %s samples", sum);
                    saw_sum = true;
                } else if (strcmp(t->name, count) == 0) {
                    if (saw_count) PFAIL("two %s samples", count);
                    saw_count = true;
                    count_v = t->value;
                }
            }
            if (!saw_inf) PFAIL("%s series without le=\"+Inf\"", fam->name);
            if (!saw_sum) PFAIL("%s series without _sum", fam->name);
            if (!saw_count) PFAIL("%s series without _count", fam->name);
            if (inf_v != count_v)
                PFAIL("%s: +Inf bucket %g != _count %g", fam->name, inf_v, count_v);
            PCHECK(buckets >= 2);
        }
    }
    return series_checked;
}

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

static const char WEIRD[] = "we\"ird\\q\nname";
static const char PLAIN[] = "emails";

static const double RTT_BOUNDS[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                     0.025,  0.05,    0.1,    0.25,  0.5,    1.0 };

static void fill_queue(rd_queue_metrics_t *m, const char *name, long long base)
{
    memset(m, 0, sizeof *m);
    m->name = rd_strndup(name, strlen(name));
    m->name_len = strlen(name);
    m->ok = true;
    m->enqueued = base + 1;
    m->claimed = base + 2;
    m->succeeded = base + 3;
    m->failed = base + 4;
    m->retried = base + 5;
    m->dead = base + 6;
    m->replayed = base + 7;
    m->lease_expired = base + 8;
    m->ready = base + 9;
    m->scheduled = base + 10;
    m->processing = base + 11;
    m->succeeded_now = base + 12;
    m->dead_now = base + 13;
    m->dead_last_24h = base + 14;
    for (size_t b = 0; b <= RD_DELAY_BUCKETS; b++) m->delay_buckets[b] = (long long)(b % 3) + base;
    m->delay_sum_ms = 123456 + base;
}

static void free_queues(rd_queue_metrics_t *qs, size_t n)
{
    for (size_t i = 0; i < n; i++) rd_free(qs[i].name);
}

static char *render(const rd_queue_metrics_t *qs, size_t n, const rd_histogram_t *rtt,
                    size_t waiters, size_t *len)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_metrics_render(&out, qs, n, rtt, waiters);
    return rd_buf_take(&out, len);
}

static exposition_t g_exp;   /* large: static, not on the stack */

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_histogram_boundaries(void **state)
{
    (void)state;
    static const double bounds[] = { 1, 2, 4 };
    rd_histogram_t h;
    rd_histogram_init(&h, bounds, 3);
    assert_int_equal(h.nbounds, 3);
    assert_int_equal(h.count, 0);
    rd_histogram_observe(&h, 1.0);    /* equal to a bound: that bucket */
    rd_histogram_observe(&h, 2.0);
    rd_histogram_observe(&h, 4.0);
    rd_histogram_observe(&h, 0.0);
    rd_histogram_observe(&h, -3.0);   /* below every bound: first bucket */
    rd_histogram_observe(&h, 1.0000001);
    rd_histogram_observe(&h, 4.0000001);  /* above every bound: +Inf */
    rd_histogram_observe(&h, 1e9);
    assert_int_equal(h.counts[0], 3);  /* 1, 0, -3 */
    assert_int_equal(h.counts[1], 2);  /* 2, 1.0000001 */
    assert_int_equal(h.counts[2], 1);  /* 4 */
    assert_int_equal(h.counts[3], 2);  /* +Inf */
    assert_int_equal(h.count, 8);
    assert_true(fabs(h.sum - (1 + 2 + 4 + 0 - 3 + 1.0000001 + 4.0000001 + 1e9)) < 1e-3);
}

static void test_histogram_init_clamps_bounds(void **state)
{
    (void)state;
    static double many[RD_HISTOGRAM_MAX_BOUNDS + 5];
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) many[i] = (double)(i + 1);
    rd_histogram_t h;
    rd_histogram_init(&h, many, sizeof many / sizeof many[0]);
    assert_int_equal(h.nbounds, RD_HISTOGRAM_MAX_BOUNDS);
    rd_histogram_observe(&h, 1e6);
    assert_int_equal(h.counts[RD_HISTOGRAM_MAX_BOUNDS], 1);
}

static rd_str_t S(const char *s)
{
    rd_str_t r = { s, strlen(s) };
    return r;
}

static void test_from_stats(void **state)
{
    (void)state;
    rd_str_t totals[] = {
        S("enqueued"), S("17"),        S("claimed"), S("15"),      S("succeeded"), S("4"),
        S("failed"), S("9"),           S("retried"), S("6"),       S("dead"), S("3"),
        S("replayed"), S("2"),         S("lease_expired"), S("1"), S("delay_le_1"), S("5"),
        S("delay_le_8"), S("7"),       S("delay_le_inf"), S("11"), S("delay_sum_ms"), S("98765"),
        S("delay_le_3600"), S("13"),   S("expired_dead"), S("42"), S("deleted"), S("8"),
    };
    rd_queue_stats_t st = {
        .pending = 12, .ready = 5, .scheduled = 7, .processing = 3, .succeeded = 21, .dead = 22,
        .dead_last_24h = 19, .totals = totals, .totals_len = sizeof totals / sizeof totals[0],
    };
    char name[] = "q1";
    rd_queue_metrics_t m;
    memset(&m, 0xAB, sizeof m);   /* garbage everywhere but the name */
    m.name = name;
    m.name_len = 2;
    rd_metrics_from_stats(&m, &st);
    assert_ptr_equal(m.name, name);
    assert_int_equal(m.name_len, 2);
    assert_true(m.ok);
    assert_int_equal(m.enqueued, 17);
    assert_int_equal(m.claimed, 15);
    assert_int_equal(m.succeeded, 4);
    assert_int_equal(m.failed, 9);
    assert_int_equal(m.retried, 6);
    assert_int_equal(m.dead, 3);
    assert_int_equal(m.replayed, 2);
    assert_int_equal(m.lease_expired, 1);
    assert_int_equal(m.ready, 5);
    assert_int_equal(m.scheduled, 7);
    assert_int_equal(m.processing, 3);
    assert_int_equal(m.succeeded_now, 21);
    assert_int_equal(m.dead_now, 22);
    assert_int_equal(m.dead_last_24h, 19);
    assert_int_equal(m.delay_sum_ms, 98765);
    for (size_t b = 0; b <= RD_DELAY_BUCKETS; b++) {
        long long want = 0;
        if (b < RD_DELAY_BUCKETS && rd_delay_bucket_bounds[b] == 1) want = 5;
        if (b < RD_DELAY_BUCKETS && rd_delay_bucket_bounds[b] == 8) want = 7;
        if (b < RD_DELAY_BUCKETS && rd_delay_bucket_bounds[b] == 3600) want = 13;
        if (b == RD_DELAY_BUCKETS) want = 11;
        if (m.delay_buckets[b] != want)
            fail_msg("delay bucket %zu: %lld, expected %lld", b, m.delay_buckets[b], want);
    }

    /* An empty stats hash: every number 0. */
    rd_queue_stats_t empty = { 0 };
    rd_metrics_from_stats(&m, &empty);
    assert_true(m.ok);
    assert_int_equal(m.enqueued + m.claimed + m.dead + m.delay_sum_ms + m.dead_now, 0);
    for (size_t b = 0; b <= RD_DELAY_BUCKETS; b++) assert_int_equal(m.delay_buckets[b], 0);
}

/* The dead-letter rules' counters (rule_<i>_retried, rule_<i>_dead): parsed
 * by position, rendered with rule and outcome labels, only for rules the
 * hash has; names that only look alike are not taken. */
static void test_rule_counters(void **state)
{
    (void)state;
    rd_str_t totals[] = {
        S("rule_0_retried"), S("4"), S("rule_0_dead"), S("1"), S("rule_19_dead"), S("7"),
        S("rule_20_dead"), S("9"), S("rule_01_dead"), S("9"), S("rule_3_done"), S("9"),
        S("rule__dead"), S("9"),
    };
    rd_queue_stats_t st = { .totals = totals, .totals_len = sizeof totals / sizeof totals[0] };
    char name[] = "rq";
    rd_queue_metrics_t m;
    m.name = name;
    m.name_len = 2;
    rd_metrics_from_stats(&m, &st);
    assert_int_equal(m.rules_seen, (1UL << 0) | (1UL << 19));
    assert_int_equal(m.rule_retried[0], 4);
    assert_int_equal(m.rule_dead[0], 1);
    assert_int_equal(m.rule_dead[19], 7);
    assert_int_equal(m.rule_retried[19], 0);
    rd_histogram_t rtt;
    static const double bounds[] = { 0.001 };
    rd_histogram_init(&rtt, bounds, 1);
    size_t len;
    char *text = render(&m, 1, &rtt, 0, &len);
    assert_non_null(strstr(text, "# TYPE retryd_dead_letter_rule_total counter\n"));
    assert_non_null(strstr(text, "retryd_dead_letter_rule_total{queue=\"rq\",rule=\"0\",outcome=\"retried\"} 4\n"));
    assert_non_null(strstr(text, "retryd_dead_letter_rule_total{queue=\"rq\",rule=\"0\",outcome=\"dead\"} 1\n"));
    assert_non_null(strstr(text, "retryd_dead_letter_rule_total{queue=\"rq\",rule=\"19\",outcome=\"dead\"} 7\n"));
    assert_null(strstr(text, "rule=\"1\""));
    rd_free(text);
}

/* The Lua library's bucket bounds (lua/00_common.lua DELAY_BUCKETS) and the
 * field names it writes are the ones rd_metrics_from_stats reads. */
static void test_delay_bounds_match_lua(void **state)
{
    (void)state;
    static const long long lua[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600 };
    assert_int_equal(sizeof lua / sizeof lua[0], RD_DELAY_BUCKETS);
    for (size_t i = 0; i < RD_DELAY_BUCKETS; i++) assert_int_equal(rd_delay_bucket_bounds[i], lua[i]);
}

static void test_render_is_valid_text_format(void **state)
{
    (void)state;
    rd_queue_metrics_t qs[2];
    fill_queue(&qs[0], PLAIN, 100);
    fill_queue(&qs[1], WEIRD, 200);
    rd_histogram_t rtt;
    rd_histogram_init(&rtt, RTT_BOUNDS, sizeof RTT_BOUNDS / sizeof RTT_BOUNDS[0]);
    static const double seen[] = { 0.00005, 0.0001, 0.0003, 0.001, 0.001, 0.004, 0.3, 1.0, 2.5 };
    for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++) rd_histogram_observe(&rtt, seen[i]);

    size_t len;
    char *text = render(qs, 2, &rtt, 3, &len);
    parse_exposition(&g_exp, text, len);
    size_t series = check_families(&g_exp);
    assert_int_equal(series, 3);   /* delay x 2 queues + rtt */

    /* Every queue-labelled value unescapes to one of the two names. */
    size_t weird = 0, plain = 0;
    for (size_t i = 0; i < g_exp.nsamples; i++) {
        const char *q = label(&g_exp.samples[i], "queue");
        if (q == NULL) continue;
        if (strcmp(q, WEIRD) == 0) weird++;
        else if (strcmp(q, PLAIN) == 0) plain++;
        else fail_msg("queue label \"%s\" is neither name", q);
    }
    assert_true(weird > 0);
    assert_int_equal(weird, plain);
    /* And the raw escape is exactly what 0.0.4 prescribes. */
    assert_non_null(strstr(text, "queue=\"we\\\"ird\\\\q\\nname\""));

    /* Counters carry the numbers given. */
    static const char *const names[] = { "enqueued", "claimed", "succeeded", "failed",
                                         "retried", "dead", "replayed", "lease_expired" };
    for (size_t c = 0; c < 8; c++) {
        char metric[64];
        snprintf(metric, sizeof metric, "retryd_%s_total", names[c]);
        family_t *f = find_family(&g_exp, metric);
        if (f == NULL) fail_msg("no family %s", metric);
        assert_string_equal(f->type, "counter");
        assert_int_equal((long long)sample_value(&g_exp, metric, PLAIN, NULL, NULL), 100 + 1 + (long long)c);
        assert_int_equal((long long)sample_value(&g_exp, metric, WEIRD, NULL, NULL), 200 + 1 + (long long)c);
    }
    /* Depth gauges. */
    static const char *const states[] = { "ready", "scheduled", "processing", "succeeded", "dead" };
    for (size_t d = 0; d < 5; d++) {
        assert_int_equal((long long)sample_value(&g_exp, "retryd_queue_messages", PLAIN, "state",
                                                 states[d]), 109 + (long long)d);
        assert_int_equal((long long)sample_value(&g_exp, "retryd_queue_messages", WEIRD, "state",
                                                 states[d]), 209 + (long long)d);
    }
    assert_string_equal(find_family(&g_exp, "retryd_queue_messages")->type, "gauge");
    assert_int_equal((long long)sample_value(&g_exp, "retryd_dead_last_24h", WEIRD, NULL, NULL), 214);

    /* The retry delay histogram: cumulative of the per-bucket numbers. */
    assert_string_equal(find_family(&g_exp, "retryd_retry_delay_seconds")->type, "histogram");
    long long cumulative = 0;
    for (size_t b = 0; b <= RD_DELAY_BUCKETS; b++) {
        cumulative += qs[1].delay_buckets[b];
        char le[32];
        if (b < RD_DELAY_BUCKETS) snprintf(le, sizeof le, "%lld", rd_delay_bucket_bounds[b]);
        else snprintf(le, sizeof le, "+Inf");
        assert_int_equal((long long)sample_value(&g_exp, "retryd_retry_delay_seconds_bucket",
                                                 WEIRD, "le", le), cumulative);
    }
    assert_int_equal((long long)sample_value(&g_exp, "retryd_retry_delay_seconds_count", WEIRD,
                                             NULL, NULL), cumulative);
    assert_true(fabs(sample_value(&g_exp, "retryd_retry_delay_seconds_sum", WEIRD, NULL, NULL) -
                     123.656) < 1e-9);

    /* The RTT histogram. */
    assert_string_equal(find_family(&g_exp, "retryd_redis_rtt_seconds")->type, "histogram");
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_count", NULL, NULL,
                                             NULL), 9);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_bucket", NULL, "le",
                                             "0.0001"), 2);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_bucket", NULL, "le",
                                             "0.001"), 5);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_bucket", NULL, "le",
                                             "1"), 8);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_bucket", NULL, "le",
                                             "+Inf"), 9);
    assert_true(fabs(sample_value(&g_exp, "retryd_redis_rtt_seconds_sum", NULL, NULL, NULL) -
                     3.80645) < 1e-5);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_waiting_claims", NULL, NULL, NULL), 3);

    rd_free(text);
    free_queues(qs, 2);
}

/* No queues (a fresh Redis) and an empty RTT histogram still make a valid
 * exposition. */
static void test_render_without_queues(void **state)
{
    (void)state;
    rd_histogram_t rtt;
    rd_histogram_init(&rtt, RTT_BOUNDS, sizeof RTT_BOUNDS / sizeof RTT_BOUNDS[0]);
    size_t len;
    char *text = render(NULL, 0, &rtt, 0, &len);
    parse_exposition(&g_exp, text, len);
    assert_int_equal(check_families(&g_exp), 1);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_count", NULL, NULL,
                                             NULL), 0);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_redis_rtt_seconds_bucket", NULL, "le",
                                             "+Inf"), 0);
    for (size_t i = 0; i < g_exp.nsamples; i++) assert_null(label(&g_exp.samples[i], "queue"));
    rd_free(text);
}

/* A queue whose stats could not be read is left out, and the rest stays valid. */
static void test_render_skips_unreadable_queue(void **state)
{
    (void)state;
    rd_queue_metrics_t qs[2];
    fill_queue(&qs[0], WEIRD, 1);
    fill_queue(&qs[1], PLAIN, 2);
    qs[0].ok = false;
    rd_histogram_t rtt;
    rd_histogram_init(&rtt, RTT_BOUNDS, sizeof RTT_BOUNDS / sizeof RTT_BOUNDS[0]);
    size_t len;
    char *text = render(qs, 2, &rtt, 0, &len);
    parse_exposition(&g_exp, text, len);
    assert_int_equal(check_families(&g_exp), 2);
    for (size_t i = 0; i < g_exp.nsamples; i++) {
        const char *q = label(&g_exp.samples[i], "queue");
        if (q) assert_string_equal(q, PLAIN);
    }
    rd_free(text);
    free_queues(qs, 2);
}

/* A queue name with every byte that needs escaping, and with bytes that do
 * not (tab, UTF-8, '}' and '='), round-trips through the label. */
static void test_label_escape_round_trip(void **state)
{
    (void)state;
    static const char *const names[] = { "\\", "\"", "\n", "\\n", "a\\\"b", "}{,=\t\xc3\xa9",
                                         "trailing\\" };
    rd_histogram_t rtt;
    rd_histogram_init(&rtt, RTT_BOUNDS, 3);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        rd_queue_metrics_t q;
        fill_queue(&q, names[i], 0);
        size_t len;
        char *text = render(&q, 1, &rtt, 0, &len);
        parse_exposition(&g_exp, text, len);
        check_families(&g_exp);
        size_t n = 0;
        for (size_t j = 0; j < g_exp.nsamples; j++) {
            const char *v = label(&g_exp.samples[j], "queue");
            if (v == NULL) continue;
            assert_string_equal(v, names[i]);
            n++;
        }
        assert_true(n > 0);
        rd_free(text);
        free_queues(&q, 1);
    }
}

/* The checker accepts good text and rejects each kind of violation, so a
 * pass above means something. */
static bool accepted(const char *text)
{
    g_soft = true;
    g_soft_why[0] = '\0';
    bool ok;
    if (setjmp(g_soft_jmp) == 0) {
        parse_exposition(&g_exp, text, strlen(text));
        check_families(&g_exp);
        ok = true;
    } else {
        ok = false;
    }
    g_soft = false;
    return ok;
}

static void test_checker_rejects_bad_exposition(void **state)
{
    (void)state;
#define H(n, t) "# HELP " n " x\n# TYPE " n " " t "\n"
#define HIST(b1, b2, binf, cnt) \
    H("h", "histogram") "h_bucket{le=\"1\"} " b1 "\nh_bucket{le=\"2\"} " b2 \
    "\nh_bucket{le=\"+Inf\"} " binf "\nh_sum 3\nh_count " cnt "\n"
    assert_true(accepted(H("a_total", "counter") "a_total{queue=\"q\\\\\\\"\\n\"} 1\n"));
    assert_string_equal(label(&g_exp.samples[0], "queue"), "q\\\"\n");
    assert_true(accepted(HIST("1", "2", "3", "3")));
    assert_true(accepted("# a plain comment\n" H("g", "gauge") "g 1 1700000000000\n"));

    static const char *const bad[] = {
        "a_total 1\n",                                                 /* no HELP/TYPE */
        "# TYPE a_total counter\na_total 1\n",                         /* no HELP */
        "# HELP a_total x\na_total 1\n",                               /* no TYPE */
        H("a_total", "counter") "# HELP a_total y\na_total 1\n",       /* two HELP */
        H("a_total", "counter") "a_total 1\n# TYPE a_total counter\n", /* TYPE after */
        H("a", "counter") "a 1\n",                                     /* no _total */
        H("a_total", "counter") H("b", "gauge") "a_total{x=\"1\"} 1\nb 2\na_total{x=\"2\"} 1\n",
        H("a_total", "counter") "a_total{queue=\"a\\tb\"} 1\n",     /* bad escape */
        H("a_total", "counter") "a_total{queue=\"a} 1\n",            /* unterminated */
        H("1a", "gauge") "1a 1\n",                                     /* bad name */
        H("a-b", "gauge") "a-b 1\n",                                   /* bad name */
        H("g", "gauge") "g x\n",                                       /* bad value */
        H("g", "gauge") "g 1",                                         /* no final newline */
        HIST("2", "1", "3", "3"),                                      /* not cumulative */
        HIST("1", "2", "3", "4"),                                      /* +Inf != count */
        H("h", "histogram") "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
            "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",         /* le descending */
        H("h", "histogram") "h_bucket{le=\"1\"} 1\nh_bucket{le=\"2\"} 1\n"
            "h_sum 1\nh_count 1\n",                                   /* no +Inf */
        H("h", "histogram") "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
            "h_count 1\n",                                            /* no _sum */
        H("h", "histogram") "h_bucket{le=\"+Inf\"} 1\nh_bucket{le=\"1\"} 1\n"
            "h_sum 1\nh_count 1\n",                                   /* bucket after +Inf */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (accepted(bad[i])) fail_msg("checker accepted bad text #%zu:\n%s", i, bad[i]);
#undef HIST
#undef H
}


/* The registry's gauges follow the per-queue families and keep the text valid. */
static void test_render_registry_gauges(void **state)
{
    (void)state;
    rd_histogram_t rtt;
    rd_histogram_init(&rtt, RTT_BOUNDS, sizeof RTT_BOUNDS / sizeof RTT_BOUNDS[0]);
    rd_buf_t out = RD_BUF_INIT;
    rd_metrics_render(&out, NULL, 0, &rtt, 0);
    rd_metrics_render_registry(&out, 12345, 11345);
    rd_metrics_render_snapshot_age(&out, 4250);
    size_t len;
    char *text = rd_buf_take(&out, &len);
    parse_exposition(&g_exp, text, len);
    check_families(&g_exp);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_registered_queues", NULL, NULL, NULL),
                     12345);
    assert_int_equal((long long)sample_value(&g_exp, "retryd_queue_series_omitted", NULL, NULL,
                                             NULL), 11345);
    assert_non_null(strstr(text, "# TYPE retryd_registered_queues gauge\n"));
    assert_non_null(strstr(text, "# TYPE retryd_queue_series_omitted gauge\n"));
    assert_true(sample_value(&g_exp, "retryd_queue_metrics_age_seconds", NULL, NULL, NULL) ==
                4.25);
    rd_free(text);
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_histogram_boundaries),
        cmocka_unit_test(test_histogram_init_clamps_bounds),
        cmocka_unit_test(test_from_stats),
        cmocka_unit_test(test_rule_counters),
        cmocka_unit_test(test_delay_bounds_match_lua),
        cmocka_unit_test(test_render_is_valid_text_format),
        cmocka_unit_test(test_render_without_queues),
        cmocka_unit_test(test_render_registry_gauges),
        cmocka_unit_test(test_render_skips_unreadable_queue),
        cmocka_unit_test(test_label_escape_round_trip),
        cmocka_unit_test(test_checker_rejects_bad_exposition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
