/* admin.c - SQS's queue upkeep on retryd's (docs/sqs.md "Queues"):
 * DeleteQueue and PurgeQueue empty the queue one bounded call at a time
 * (queue_clear.h), tags are the queue's tags HASH, and the dead-letter
 * sources are the registry's links read backwards. */
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/queue_clear.h"
#include "retryd/sqs/face.h"

enum { TAG_KEY_MAX = 128, TAG_VALUE_MAX = 256, DLQ_SOURCES_MAX = 1000 };

static void on_cleared(const rd_store_cleared_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    rd_sqs_answer(r, NULL);
}

/* A client that left stops the loop between calls (the next request goes
 * on where it stopped). */
static bool client_still_there(void *arg)
{
    const rd_sqs_req_t *r = arg;
    return !rd_http_exchange_client_gone(r->ex);
}

static void on_delete_exists(rd_sqs_req_t *r)
{
    rd_sqs_started(r, rd_queue_clear(r->sqs->store, rd_sqs_queue(r), RD_QUEUE_DROP,
                                     client_still_there, on_cleared, r));
}

void rd_sqs_delete_queue(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_delete_exists);
}

static void on_purge_exists(rd_sqs_req_t *r)
{
    rd_sqs_started(r, rd_queue_clear(r->sqs->store, rd_sqs_queue(r), RD_QUEUE_PURGE_ALL,
                                     client_still_there, on_cleared, r));
}

void rd_sqs_purge_queue(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_purge_exists);
}

/* ------------------------------------------------------------ tags */

static void on_tags_changed(const rd_store_count_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (res->head.status == RD_STORE_INVALID_STATE) {
        rd_sqs_fail(r, &RD_SQS_ERR_TOO_MANY_TAGS, "Too many tags: a queue has at most %d.",
                    RD_TAGS_MAX);
        return;
    }
    if (rd_sqs_store_failed(r, &res->head)) return;
    rd_sqs_answer(r, NULL);
}

typedef struct tag_list {
    size_t n;
    rd_str_t strs[2 * RD_TAGS_MAX];
} tag_list_t;

/* Tags (a map) or TagKeys (a list) into t, checked as SQS checks them. */
static bool read_tags(rd_sqs_req_t *r, const cJSON *in, bool keys_only, tag_list_t *t)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        const char *key = keys_only ? (cJSON_IsString(it) ? it->valuestring : NULL) : it->string;
        const char *value = keys_only ? NULL : (cJSON_IsString(it) ? it->valuestring : NULL);
        size_t klen = key ? strlen(key) : 0;
        if (klen == 0 || klen > TAG_KEY_MAX || (!keys_only && value == NULL) ||
            (value && strlen(value) > TAG_VALUE_MAX)) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                        "Tag keys are 1-128 characters, values at most 256.");
            return false;
        }
        if (t->n + (keys_only ? 1 : 2) > 2 * RD_TAGS_MAX) {
            rd_sqs_fail(r, &RD_SQS_ERR_TOO_MANY_TAGS, "Too many tags: a queue has at most %d.",
                        RD_TAGS_MAX);
            return false;
        }
        t->strs[t->n++] = (rd_str_t){ key, klen };
        if (!keys_only) t->strs[t->n++] = (rd_str_t){ value, strlen(value) };
    }
    if (t->n == 0) {
        rd_sqs_fail(r, &RD_SQS_ERR_MISSING_PARAMETER, "The request must contain %s.",
                    keys_only ? "TagKeys" : "Tags");
        return false;
    }
    return true;
}

static void on_tag_exists(rd_sqs_req_t *r)
{
    bool untag = strcmp(r->action->name, "UntagQueue") == 0;
    tag_list_t *t = rd_calloc(1, sizeof *t);
    r->state = t;
    r->free_state = rd_free;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(r->call.params, untag ? "TagKeys" : "Tags");
    if (!read_tags(r, in, untag, t)) return;
    rd_sqs_started(r, untag ? rd_store_tags_remove(r->sqs->store, rd_sqs_queue(r), t->n, t->strs,
                                                   on_tags_changed, r)
                            : rd_store_tags_set(r->sqs->store, rd_sqs_queue(r), t->n / 2, t->strs,
                                                on_tags_changed, r));
}

void rd_sqs_tag_queue(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_tag_exists);
}

void rd_sqs_untag_queue(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_tag_exists);
}

static void on_tags_got(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON *tags = NULL;
    for (size_t i = 0; i + 1 < res->count; i += 2) {
        if (res->strings[i].ptr == NULL || res->strings[i + 1].ptr == NULL) continue;
        if (tags == NULL) tags = cJSON_AddObjectToObject(o, "Tags");
        char *k = rd_strndup(res->strings[i].ptr, res->strings[i].len);
        char *v = rd_strndup(res->strings[i + 1].ptr, res->strings[i + 1].len);
        cJSON_AddStringToObject(tags, k, v);
        rd_free(k);
        rd_free(v);
    }
    rd_sqs_answer(r, o);
}

static void on_list_tags_exists(rd_sqs_req_t *r)
{
    rd_sqs_started(r, rd_store_tags_get(r->sqs->store, rd_sqs_queue(r), on_tags_got, r));
}

void rd_sqs_list_queue_tags(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_list_tags_exists);
}

/* ------------------------------------------------------------ dead-letter sources */

static void on_sources(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON *urls = cJSON_AddArrayToObject(o, "queueUrls");
    for (size_t i = 1; i < res->count; i++) {
        const rd_str_t *n = &res->strings[i];
        if (n->ptr == NULL || !rd_sqs_queue_name_ok(n->ptr, n->len)) continue;
        char url[512];
        rd_sqs_queue_url(r->sqs, n->ptr, n->len, url, sizeof url);
        cJSON_AddItemToArray(urls, cJSON_CreateString(url));
    }
    const rd_str_t *next = res->count > 0 ? &res->strings[0] : NULL;
    if (next && next->ptr && !(next->len == 1 && next->ptr[0] == '0')) {
        char *token = rd_strndup(next->ptr, next->len);
        cJSON_AddStringToObject(o, "NextToken", token);
        rd_free(token);
    }
    rd_sqs_answer(r, o);
}

static void on_sources_exists(rd_sqs_req_t *r)
{
    long long max = DLQ_SOURCES_MAX;
    if (!rd_sqs_int(r, r->call.params, "MaxResults", 1, DLQ_SOURCES_MAX, &max)) return;
    const char *token = rd_sqs_str(r->call.params, "NextToken");
    /* The registry's links are scanned: its cursor is the token, digits. */
    if (token && (token[0] == '\0' || strspn(token, "0123456789") != strlen(token))) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, "Invalid NextToken value.");
        return;
    }
    rd_sqs_started(r, rd_store_dlq_sources(r->sqs->store, rd_sqs_queue(r), token, (int)max,
                                           on_sources, r));
}

void rd_sqs_list_dead_letter_source_queues(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_sources_exists);
}
