/* queue_lines.c - the table of queue names to lines (include/retryd/queue_lines.h). */
#include "retryd/queue_lines.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hash.h"

static rd_line_key_t **bucket_of(rd_line_table_t *t, const char *name, size_t len)
{
    return &t->buckets[rd_hash(name, len) % RD_LINE_BUCKETS];
}

rd_line_key_t *rd_line_table_find(const rd_line_table_t *t, rd_store_queue_t q)
{
    for (rd_line_key_t *k = t->buckets[rd_hash(q.name, q.len) % RD_LINE_BUCKETS]; k; k = k->next)
        if (k->len == q.len && k->shard == q.shard && memcmp(k->name, q.name, q.len) == 0)
            return k;
    return NULL;
}

void rd_line_table_add(rd_line_table_t *t, rd_line_key_t *k, rd_store_queue_t q)
{
    k->name = rd_strndup(q.name, q.len);
    k->len = q.len;
    k->shard = q.shard;
    rd_line_key_t **b = bucket_of(t, q.name, q.len);
    k->next = *b;
    *b = k;
}

void rd_line_table_remove(rd_line_table_t *t, rd_line_key_t *k)
{
    for (rd_line_key_t **p = bucket_of(t, k->name, k->len); *p; p = &(*p)->next) {
        if (*p == k) {
            *p = k->next;
            break;
        }
    }
    rd_free(k->name);
    k->name = NULL;
}

void rd_line_table_clear(rd_line_table_t *t, void (*each)(rd_line_key_t *k, void *arg), void *arg)
{
    for (size_t b = 0; b < RD_LINE_BUCKETS; b++) {
        rd_line_key_t *k = t->buckets[b];
        t->buckets[b] = NULL;
        while (k) {
            rd_line_key_t *next = k->next;
            rd_free(k->name);
            k->name = NULL;
            each(k, arg);
            k = next;
        }
    }
}
