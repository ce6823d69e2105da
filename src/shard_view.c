/* shard_view.c - the views of sharded queues (include/retryd/shard_view.h):
 * a small chained table by queue name, bounded by the sharded queues this
 * daemon placed on in the last RD_SHARD_VIEW_IDLE_MS. */
#include "retryd/shard_view.h"

#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hash.h"

enum { BUCKETS = 64 };

typedef struct entry {
    struct entry *next;
    char *name;
    size_t len;
    uint64_t used_ms, learned_ms;
    bool refreshing;
    rd_shard_view_t view;
} entry_t;

struct rd_shard_views {
    entry_t *buckets[BUCKETS];
};

rd_shard_views_t *rd_shard_views_new(void)
{
    return rd_calloc(1, sizeof(rd_shard_views_t));
}

void rd_shard_views_free(rd_shard_views_t *vs)
{
    if (vs == NULL) return;
    for (size_t b = 0; b < BUCKETS; b++) {
        for (entry_t *e = vs->buckets[b]; e;) {
            entry_t *next = e->next;
            rd_free(e->name);
            rd_free(e);
            e = next;
        }
    }
    rd_free(vs);
}

static entry_t **slot_of(rd_shard_views_t *vs, rd_store_queue_t q)
{
    entry_t **p = &vs->buckets[rd_hash(q.name, q.len) % BUCKETS];
    while (*p && !((*p)->len == q.len && memcmp((*p)->name, q.name, q.len) == 0)) p = &(*p)->next;
    return p;
}

static void drop(entry_t **p)
{
    entry_t *e = *p;
    *p = e->next;
    rd_free(e->name);
    rd_free(e);
}

rd_shard_view_t *rd_shard_views_find(rd_shard_views_t *vs, rd_store_queue_t q, uint64_t now_ms)
{
    if (vs == NULL) return NULL;
    entry_t **p = slot_of(vs, q);
    if (*p == NULL) return NULL;
    if (now_ms > (*p)->used_ms + RD_SHARD_VIEW_IDLE_MS) {
        drop(p);
        return NULL;
    }
    (*p)->used_ms = now_ms;
    return &(*p)->view;
}

bool rd_shard_views_refresh_due(rd_shard_views_t *vs, rd_store_queue_t q, uint64_t now_ms)
{
    if (vs == NULL) return false;
    entry_t *e = *slot_of(vs, q);
    if (e == NULL || e->refreshing || now_ms < e->learned_ms + RD_SHARD_VIEW_REFRESH_MS)
        return false;
    e->refreshing = true;
    return true;
}

void rd_shard_views_refresh_failed(rd_shard_views_t *vs, rd_store_queue_t q)
{
    if (vs == NULL) return;
    entry_t *e = *slot_of(vs, q);
    if (e) e->refreshing = false;
}

static bool is(const rd_str_t *s, const char *lit)
{
    return s->ptr && s->len == strlen(lit) && memcmp(s->ptr, lit, s->len) == 0;
}

/* "a,b,c" of numbers into out (at most max); returns how many. */
static int numbers(const rd_str_t *s, long long *out, int max)
{
    int n = 0;
    const char *p = s->ptr, *end = s->ptr + s->len;
    while (p && p < end && n < max) {
        out[n++] = strtoll(p, NULL, 10);
        const char *comma = memchr(p, ',', (size_t)(end - p));
        p = comma ? comma + 1 : end;
    }
    return n;
}

bool rd_shard_layout_read(const rd_str_t *pairs, size_t n, rd_shard_view_t *out)
{
    rd_shard_view_t v = { .n = 1 };
    const rd_str_t *salts = NULL, *keys = NULL;
    for (size_t i = 0; i + 1 < n; i += 2) {
        const rd_str_t *f = &pairs[i], *val = &pairs[i + 1];
        if (is(f, "shards")) v.n = (int)rd_str_number(val);
        else if (is(f, "layout.rev")) v.rev = rd_str_number(val);
        else if (is(f, "layout.from")) v.from = (int)rd_str_number(val);
        else if (is(f, "layout.lowering")) v.lowering = (int)rd_str_number(val);
        else if (is(f, "layout.hw")) v.hw = (int)rd_str_number(val);
        else if (is(f, "layout.salts")) salts = val;
        else if (is(f, "layout.keys")) keys = val;
    }
    if (v.n < 1 || v.n > RD_SHARDS_MAX) v.n = 1;
    if (v.hw < v.n || v.hw > RD_SHARDS_MAX) v.hw = v.n;
    if (salts) {
        long long s[RD_SHARDS_MAX - 1];
        v.nsalts = numbers(salts, s, RD_SHARDS_MAX - 1);
        for (int i = 0; i < v.nsalts; i++) v.salts[i] = (uint16_t)s[i];
    }
    if (keys) {
        /* "N@until,...", newest first */
        const char *s = keys->ptr, *end = keys->ptr + keys->len;
        while (s && s < end && v.nkeys < RD_SHARD_VIEW_KEYS_MAX) {
            char *at;
            long long count = strtoll(s, &at, 10);
            if (at >= end || *at != '@') break;
            v.keys[v.nkeys].n = (int)count;
            v.keys[v.nkeys].until_ms = strtoll(at + 1, NULL, 10);
            v.nkeys++;
            const char *comma = memchr(s, ',', (size_t)(end - s));
            s = comma ? comma + 1 : end;
        }
    }
    *out = v;
    return v.n > 1 && v.rev > 0;
}

void rd_shard_views_learn(rd_shard_views_t *vs, rd_store_queue_t q, const rd_str_t *pairs,
                          size_t n, uint64_t now_ms)
{
    rd_shard_view_t v;
    bool sharded = rd_shard_layout_read(pairs, n, &v);
    entry_t **p = slot_of(vs, q);
    if (!sharded) {
        if (*p) drop(p);
        return;
    }
    if (*p == NULL) {
        entry_t *e = rd_calloc(1, sizeof *e);
        e->name = rd_strndup(q.name, q.len);
        e->len = q.len;
        *p = e;
    }
    v.next = (*p)->view.next;
    (*p)->view = v;
    (*p)->used_ms = now_ms;
    (*p)->learned_ms = now_ms;
    (*p)->refreshing = false;
}

rd_store_queue_t rd_shard_view_at(const rd_shard_view_t *v, rd_store_queue_t q, int shard)
{
    rd_store_queue_t at = { .name = q.name, .len = q.len };
    if (v == NULL) return at;
    at.shard = shard;
    at.salts = v->salts;
    at.nsalts = v->nsalts;
    at.rev = v->rev;
    return at;
}

/* The count placements go by: a lowering places only below its target. */
static int placing_count(const rd_shard_view_t *v)
{
    return v->lowering > 0 && v->lowering < v->n ? v->lowering : v->n;
}

static void add(rd_shard_attempts_t *out, int shard)
{
    for (int i = 0; i < out->n; i++)
        if (out->shard[i] == shard) return;
    if (out->n < RD_SHARD_ATTEMPTS_MAX) out->shard[out->n++] = shard;
}

void rd_shard_view_attempts(rd_shard_view_t *v, const rd_enqueue_t *e, uint64_t now_ms,
                            rd_shard_attempts_t *out)
{
    out->n = 0;
    if (v == NULL) {
        out->shard[out->n++] = 0;
        return;
    }
    int n = placing_count(v);
    const char *by = e->group && e->group[0] ? e->group : e->idempotency_key;
    if (by == NULL || by[0] == '\0') {
        out->shard[out->n++] = (int)(v->next++ % (unsigned)n);
        return;
    }
    uint32_t h = rd_shards_fnv(by, strlen(by));
    int now = rd_shards_jump(h, n);
    if (by == e->group) {
        if (v->from > 0 && v->from < n) add(out, rd_shards_jump(h, v->from));
    } else {
        for (int i = 0; i < v->nkeys; i++)
            if (v->keys[i].until_ms > (long long)now_ms && v->keys[i].n >= 1)
                add(out, rd_shards_jump(h, v->keys[i].n));
    }
    /* The shard of now last, and only once: an older count that agrees
     * with it needs no look of its own. */
    for (int i = 0; i < out->n; i++)
        if (out->shard[i] == now) {
            memmove(&out->shard[i], &out->shard[i + 1], (size_t)(out->n - i - 1) * sizeof(int));
            out->n--;
            break;
        }
    if (out->n >= RD_SHARD_ATTEMPTS_MAX) out->n = RD_SHARD_ATTEMPTS_MAX - 1;
    out->shard[out->n++] = now;
}
