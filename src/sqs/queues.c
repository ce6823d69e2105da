/* queues.c - SQS's queue actions on retryd's queues (docs/sqs.md "Queues",
 * "Attributes and the policy"): an SQS queue is the retryd queue of the same
 * name, its attributes are fields of its policy, its counts its stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "retryd/alloc.h"
#include "retryd/shard_stats.h"
#include "retryd/json.h"
#include "retryd/log.h"
#include "retryd/sqs/face.h"

/* A JSON document inside an attribute (RedrivePolicy), read as strictly as
 * a request body (json.h rd_json_parse: one value, RFC 8259's grammar, no
 * escaped U+0000); NULL when it is not. cJSON_Delete frees it. */
static cJSON *parse_strict(const char *text)
{
    bool has_nul = false;
    rd_json_t *doc = rd_json_parse(text, strlen(text), &has_nul);
    if (doc != NULL && has_nul) {
        rd_json_free(doc);
        doc = NULL;
    }
    return doc ? rd_json_cjson(doc) : NULL;
}

/* SQS's defaults for a queue it creates. */
enum {
    SQS_RETENTION_DEFAULT = 345600, SQS_RETENTION_MIN = 60, SQS_RETENTION_MAX = 1209600,
    SQS_MESSAGE_SIZE_MIN = 1024, SQS_VISIBILITY_DEFAULT = 30, SQS_MAX_RECEIVE_COUNT = 1000,
    SQS_LIST_MAX = 1000,
};

/* ------------------------------------------------------------ attributes */

/* The attributes SQS accepts on CreateQueue and SetQueueAttributes that
 * retryd does not act on (encryption and access policies, which Redis and
 * --sqs-credentials cover): accepted and not kept (docs/sqs.md). */
static bool attribute_ignored(const char *name)
{
    static const char *const ignored[] = {
        "Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled",
        "RedriveAllowPolicy", "DeduplicationScope", "FifoThroughputLimit",
    };
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        if (strcmp(ignored[i], name) == 0) return true;
    return false;
}

/* An integer attribute value in min..max. */
static bool attr_int(const cJSON *v, long long min, long long max, long long *out)
{
    char buf[32];
    const char *s = NULL;
    if (cJSON_IsString(v)) s = v->valuestring;
    else if (cJSON_IsNumber(v)) {
        snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
        s = buf;
    }
    if (s == NULL || *s == '\0') return false;
    char *end;
    long long n = strtoll(s, &end, 10);
    if (*end || n < min || n > max) return false;
    *out = n;
    return true;
}

static bool attr_bool(const cJSON *v, bool *out)
{
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return true;
    }
    if (!cJSON_IsString(v)) return false;
    if (strcmp(v->valuestring, "true") == 0) *out = true;
    else if (strcmp(v->valuestring, "false") == 0) *out = false;
    else return false;
    return true;
}

/* The Attributes of a CreateQueue or SetQueueAttributes onto p. Returns
 * NULL, or the error with why[]. */
static const rd_sqs_error_t *attributes_to_policy(rd_sqs_req_t *r, const cJSON *attrs,
                                                  bool creating, rd_policy_t *p, char *why,
                                                  size_t why_len)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, attrs) {
        const char *name = v->string;
        long long n;
        bool b;
        if (strcmp(name, "VisibilityTimeout") == 0) {
            if (!attr_int(v, 0, RD_SQS_VISIBILITY_MAX, &n)) goto bad_value;
            p->lease_seconds = n > 0 ? n : 1;   /* retryd's shortest lease */
        } else if (strcmp(name, "DelaySeconds") == 0) {
            if (!attr_int(v, 0, RD_SQS_DELAY_MAX, &n)) goto bad_value;
            p->delay_seconds = n;
        } else if (strcmp(name, "MessageRetentionPeriod") == 0) {
            if (!attr_int(v, SQS_RETENTION_MIN, SQS_RETENTION_MAX, &n)) goto bad_value;
            p->message_ttl_s = n;
            snprintf(p->on_expiry, sizeof p->on_expiry, "delete");
        } else if (strcmp(name, "MaximumMessageSize") == 0) {
            if (!attr_int(v, SQS_MESSAGE_SIZE_MIN, RD_SQS_BODY_MAX, &n)) goto bad_value;
            p->max_payload_bytes = n;
        } else if (strcmp(name, "ReceiveMessageWaitTimeSeconds") == 0) {
            if (!attr_int(v, 0, RD_SQS_WAIT_MAX, &n)) goto bad_value;
            p->wait_seconds = n;
        } else if (strcmp(name, "FifoQueue") == 0) {
            if (!attr_bool(v, &b)) goto bad_value;
            if (!creating || b != r->fifo) {
                snprintf(why, why_len, "Invalid value for the parameter FifoQueue: a FIFO queue's "
                                       "name ends in .fifo, and the attribute is set only at "
                                       "creation.");
                return &RD_SQS_ERR_INVALID_ATTRIBUTE_VALUE;
            }
        } else if (strcmp(name, "ContentBasedDeduplication") == 0) {
            if (!attr_bool(v, &b)) goto bad_value;
            if (!r->fifo) {
                snprintf(why, why_len, "Unknown Attribute ContentBasedDeduplication: only FIFO "
                                       "queues have it.");
                return &RD_SQS_ERR_INVALID_ATTRIBUTE_NAME;
            }
            p->content_based_dedup = b ? 1 : 0;
        } else if (strcmp(name, "RedrivePolicy") == 0) {
            if (!cJSON_IsString(v)) goto bad_value;
            if (v->valuestring[0] == '\0') {
                /* "" removes it: received until retention ends them. */
                p->nulls |= RD_POLICY_NULL(dead_letter_queue);
                p->max_retries = RD_POLICY_UNLIMITED;
                continue;
            }
            cJSON *rp = parse_strict(v->valuestring);
            const char *arn = rp ? rd_sqs_str(rp, "deadLetterTargetArn") : NULL;
            const cJSON *mrc = rp ? cJSON_GetObjectItemCaseSensitive(rp, "maxReceiveCount") : NULL;
            size_t tlen = 0;
            const char *target = arn ? rd_sqs_name_of_arn(r->sqs, arn, &tlen) : NULL;
            bool ok = target && rd_sqs_queue_name_ok(target, tlen) &&
                      attr_int(mrc, 1, SQS_MAX_RECEIVE_COUNT, &n);
            if (ok && (tlen == r->queue_len && memcmp(target, r->queue, tlen) == 0)) ok = false;
            /* SQS: the dead-letter queue is of the same type as its source. */
            bool target_fifo = tlen > 5 && memcmp(target + tlen - 5, ".fifo", 5) == 0;
            if (ok && target_fifo != r->fifo) ok = false;
            if (ok) {
                rd_free(p->dead_letter_queue_owned);
                p->dead_letter_queue_owned = rd_strndup(target, tlen);
                p->dead_letter_queue = p->dead_letter_queue_owned;
                p->dead_letter_queue_len = tlen;
                /* A message with max_retries M is delivered at most M times
                 * (docs/reference.md "Messages"): maxReceiveCount exactly. */
                p->max_retries = n;
            }
            cJSON_Delete(rp);
            if (!ok) {
                snprintf(why, why_len, "Value %.100s for parameter RedrivePolicy is invalid. "
                                       "Reason: deadLetterTargetArn must be another queue (FIFO "
                                       "for a FIFO queue, standard for a standard one) of "
                                       "this endpoint and maxReceiveCount from 1 to 1000.",
                         v->valuestring);
                return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
            }
        } else if (attribute_ignored(name)) {
            continue;
        } else {
            snprintf(why, why_len, "Unknown Attribute %.100s.", name);
            return &RD_SQS_ERR_INVALID_ATTRIBUTE_NAME;
        }
        continue;
    bad_value:
        snprintf(why, why_len, "Invalid value for the parameter %.100s.", name);
        return &RD_SQS_ERR_INVALID_ATTRIBUTE_VALUE;
    }
    return NULL;
}

/* The attributes GetQueueAttributes answers, by name. */
enum {
    A_ARN = 1 << 0, A_VISIBLE = 1 << 1, A_NOT_VISIBLE = 1 << 2, A_DELAYED = 1 << 3,
    A_CREATED = 1 << 4, A_MODIFIED = 1 << 5, A_VISIBILITY = 1 << 6, A_DELAY = 1 << 7,
    A_RETENTION = 1 << 8, A_SIZE = 1 << 9, A_WAIT = 1 << 10, A_REDRIVE = 1 << 11,
    A_FIFO = 1 << 12, A_CONTENT_DEDUP = 1 << 13, A_ALL = (1 << 14) - 1,
};

static const struct { const char *name; unsigned bit; } QUEUE_ATTRIBUTES[] = {
    { "QueueArn", A_ARN },
    { "ApproximateNumberOfMessages", A_VISIBLE },
    { "ApproximateNumberOfMessagesNotVisible", A_NOT_VISIBLE },
    { "ApproximateNumberOfMessagesDelayed", A_DELAYED },
    { "CreatedTimestamp", A_CREATED },
    { "LastModifiedTimestamp", A_MODIFIED },
    { "VisibilityTimeout", A_VISIBILITY },
    { "DelaySeconds", A_DELAY },
    { "MessageRetentionPeriod", A_RETENTION },
    { "MaximumMessageSize", A_SIZE },
    { "ReceiveMessageWaitTimeSeconds", A_WAIT },
    { "RedrivePolicy", A_REDRIVE },
    { "FifoQueue", A_FIFO },
    { "ContentBasedDeduplication", A_CONTENT_DEDUP },
};

static void add_ll(cJSON *o, const char *name, long long v)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", v);
    cJSON_AddStringToObject(o, name, s);
}

/* The queue's attributes as SQS shows them, from its policy and stats. */
static cJSON *policy_to_attributes(const rd_sqs_req_t *r, unsigned want, const rd_policy_t *p,
                                   const rd_queue_stats_t *st)
{
    cJSON *a = cJSON_CreateObject();
    char s[512];
    if (want & A_ARN) {
        rd_sqs_queue_arn(r->sqs, r->queue, r->queue_len, s, sizeof s);
        cJSON_AddStringToObject(a, "QueueArn", s);
    }
    if (want & A_VISIBLE) add_ll(a, "ApproximateNumberOfMessages", st->ready);
    if (want & A_NOT_VISIBLE) add_ll(a, "ApproximateNumberOfMessagesNotVisible", st->processing);
    if (want & A_DELAYED) add_ll(a, "ApproximateNumberOfMessagesDelayed", st->scheduled);
    if (want & A_CREATED) add_ll(a, "CreatedTimestamp", p->created_at_ms / 1000);
    if (want & A_MODIFIED) add_ll(a, "LastModifiedTimestamp", p->updated_at_ms / 1000);
    if (want & A_VISIBILITY)
        add_ll(a, "VisibilityTimeout",
               p->lease_seconds > 0 ? p->lease_seconds : r->sqs->default_lease_ms / 1000);
    if (want & A_DELAY) add_ll(a, "DelaySeconds", p->delay_seconds > 0 ? p->delay_seconds : 0);
    if (want & A_RETENTION)
        add_ll(a, "MessageRetentionPeriod",
               p->message_ttl_s > 0 && p->message_ttl_s <= SQS_RETENTION_MAX ? p->message_ttl_s
                                                                              : SQS_RETENTION_MAX);
    if (want & A_SIZE)
        add_ll(a, "MaximumMessageSize",
               p->max_payload_bytes > 0 && p->max_payload_bytes <= RD_SQS_BODY_MAX
                   ? p->max_payload_bytes : RD_SQS_BODY_MAX);
    if (want & A_WAIT)
        add_ll(a, "ReceiveMessageWaitTimeSeconds", p->wait_seconds > 0 ? p->wait_seconds : 0);
    if ((want & A_REDRIVE) && p->dead_letter_queue && p->dead_letter_queue_len > 0) {
        char arn[400];
        rd_sqs_queue_arn(r->sqs, p->dead_letter_queue, p->dead_letter_queue_len, arn, sizeof arn);
        long long receives = p->max_retries > 0 ? p->max_retries : 3;
        snprintf(s, sizeof s, "{\"deadLetterTargetArn\":\"%s\",\"maxReceiveCount\":%lld}", arn,
                 receives);
        cJSON_AddStringToObject(a, "RedrivePolicy", s);
    }
    if ((want & A_FIFO) && r->fifo) cJSON_AddStringToObject(a, "FifoQueue", "true");
    if ((want & A_CONTENT_DEDUP) && r->fifo)
        cJSON_AddStringToObject(a, "ContentBasedDeduplication",
                                p->content_based_dedup == 1 ? "true" : "false");
    return a;
}

/* ------------------------------------------------------------ does it exist */

/* Whether a queue exists, from the registry's name index: the one page
 * that starts just before the name. */
typedef struct exists_state {
    rd_sqs_exists_fn then;
    const char *name;
    size_t len;
} exists_state_t;

static void on_exists_page(const rd_store_page_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    exists_state_t *e = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    bool found = res->count > 0 && res->names[0].len == e->len &&
                 memcmp(res->names[0].ptr, e->name, e->len) == 0;
    rd_sqs_exists_fn then = e->then;
    rd_free(e);
    r->state = NULL;
    r->free_state = NULL;
    if (!found) {
        rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
        return;
    }
    then(r);
}

void rd_sqs_queue_exists(rd_sqs_req_t *r, const char *name, size_t len, rd_sqs_exists_fn then)
{
    exists_state_t *e = rd_calloc(1, sizeof *e);
    e->then = then;
    e->name = name;
    e->len = len;
    r->state = e;
    r->free_state = rd_free;
    char cursor[RD_SQS_CURSOR_MAX];
    size_t clen = rd_sqs_cursor_before(name, len, cursor);
    rd_sqs_started(r, rd_store_queues_page(r->sqs->store, cursor, clen, 1, on_exists_page, r));
}

static void answer_url(rd_sqs_req_t *r)
{
    char url[512];
    rd_sqs_queue_url(r->sqs, r->queue, r->queue_len, url, sizeof url);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "QueueUrl", url);
    rd_sqs_answer(r, o);
}

/* ------------------------------------------------------------ CreateQueue */

/* Writing a policy: the dead-letter queue's link first when one is given
 * (the registry refuses cycles, docs/lifecycle.md "Cycles"), then the
 * policy; then done(). */
typedef struct policy_write {
    rd_policy_t policy;
    bool create;                /* CreateQueue: write only a new queue's policy */
    void (*done)(rd_sqs_req_t *r, const rd_store_policy_t *res);
} policy_write_t;

static void policy_write_free(void *state)
{
    policy_write_t *w = state;
    rd_policy_free(&w->policy);
    rd_free(w);
}

static void on_policy_written(const rd_store_policy_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    policy_write_t *w = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    w->done(r, res);
}

static void policy_write_send(rd_sqs_req_t *r)
{
    policy_write_t *w = r->state;
    rd_sqs_started(r, w->create ? rd_store_policy_create(r->sqs->store, rd_sqs_queue(r),
                                                         &w->policy, on_policy_written, r)
                                : rd_store_policy_set(r->sqs->store, rd_sqs_queue(r), &w->policy,
                                                      on_policy_written, r));
}

static void on_dlq_linked(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    const rd_str_t *first = res->count > 0 ? &res->strings[0] : NULL;
    if (first == NULL || first->ptr == NULL || first->len != 2 || memcmp(first->ptr, "ok", 2) != 0) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue "
                    "leads back to this queue, or starts a chain of more than 100 queues.");
        return;
    }
    policy_write_send(r);
}

static void policy_write_start(rd_sqs_req_t *r)
{
    policy_write_t *w = r->state;
    if (w->policy.dead_letter_queue || (w->policy.nulls & RD_POLICY_NULL(dead_letter_queue))) {
        rd_store_queue_t target = { .name = w->policy.dead_letter_queue, .len = w->policy.dead_letter_queue_len };
        rd_sqs_started(r, rd_store_dlq_link(r->sqs->store, rd_sqs_queue(r), target,
                                            on_dlq_linked, r));
        return;
    }
    policy_write_send(r);
}

/* CreateQueue of a queue that exists succeeds when every attribute given
 * is what the queue has, as SQS's does; else QueueAlreadyExists. */
static bool same_attributes(const rd_sqs_req_t *r, const cJSON *given, const rd_policy_t *p)
{
    rd_queue_stats_t none;
    memset(&none, 0, sizeof none);
    cJSON *have = policy_to_attributes(r, A_ALL, p, &none);
    bool same = true;
    const cJSON *v;
    cJSON_ArrayForEach(v, given) {
        if (attribute_ignored(v->string)) continue;
        const char *h = rd_sqs_str(have, v->string);
        char buf[32];
        const char *g = cJSON_IsString(v) ? v->valuestring : NULL;
        if (cJSON_IsNumber(v)) {
            snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
            g = buf;
        } else if (cJSON_IsBool(v)) {
            g = cJSON_IsTrue(v) ? "true" : "false";
        }
        if (strcmp(v->string, "RedrivePolicy") == 0 && g && h) {
            cJSON *a = parse_strict(g), *b = parse_strict(h);
            same = a && b && cJSON_Compare(a, b, true);
            if (!same && a && b) {
                /* maxReceiveCount may come as a string. */
                cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "maxReceiveCount");
                if (cJSON_IsString(n))
                    cJSON_ReplaceItemInObjectCaseSensitive(a, "maxReceiveCount",
                                                           cJSON_CreateNumber(atof(n->valuestring)));
                same = cJSON_Compare(a, b, true);
            }
            cJSON_Delete(a);
            cJSON_Delete(b);
        } else if (strcmp(v->string, "ContentBasedDeduplication") == 0 && g && h == NULL) {
            same = strcmp(g, "false") == 0;
        } else {
            same = g && h && strcmp(g, h) == 0;
        }
        if (!same) break;
    }
    cJSON_Delete(have);
    return same;
}

static void on_created_tagged(const rd_store_count_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    answer_url(r);
}

static void on_created(rd_sqs_req_t *r, const rd_store_policy_t *res)
{
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(r->call.params, "Attributes");
    if (!res->created && !same_attributes(r, attrs, &res->policy)) {
        rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_ALREADY_EXISTS,
                    "A queue already exists with the same name and a different value for an "
                    "attribute.");
        return;
    }
    /* CreateQueue's tags (the model's lowercase member). */
    const cJSON *tags = cJSON_GetObjectItemCaseSensitive(r->call.params, "tags");
    size_t n = (size_t)cJSON_GetArraySize(tags);
    if (!res->created || n == 0) {
        answer_url(r);
        return;
    }
    if (n > RD_SQS_TAGS_MAX) {
        rd_sqs_fail(r, &RD_SQS_ERR_TOO_MANY_TAGS, "Too many tags: a queue has at most %d.",
                    RD_SQS_TAGS_MAX);
        return;
    }
    rd_str_t strs[2 * RD_SQS_TAGS_MAX];
    size_t k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tags) {
        if (!cJSON_IsString(it)) continue;
        strs[k++] = (rd_str_t){ it->string, strlen(it->string) };
        strs[k++] = (rd_str_t){ it->valuestring, strlen(it->valuestring) };
    }
    if (k == 0) {
        answer_url(r);
        return;
    }
    rd_sqs_started(r, rd_store_tags_set(r->sqs->store, rd_sqs_queue(r), k / 2, strs,
                                        on_created_tagged, r));
}

void rd_sqs_create_queue(rd_sqs_req_t *r)
{
    const char *name = rd_sqs_required(r, r->call.params, "QueueName");
    if (name == NULL) return;
    size_t len = strlen(name);
    if (!rd_sqs_queue_name_ok(name, len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 "
                    "in length.");
        return;
    }
    r->queue = rd_strndup(name, len);
    r->queue_len = len;
    r->fifo = len > 5 && memcmp(name + len - 5, ".fifo", 5) == 0;
    if (r->key && !rd_sqs_key_allows(r->key, name, len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_ACCESS_DENIED, "The key %s is not allowed to use queue %s.",
                    rd_sqs_key_id(r->key), name);
        return;
    }
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(r->call.params, "Attributes");
    const cJSON *fifo = cJSON_GetObjectItemCaseSensitive(attrs, "FifoQueue");
    bool fifo_given = false;
    if (r->fifo && (fifo == NULL || !attr_bool(fifo, &fifo_given) || !fifo_given)) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                    "or underscores, must end with .fifo suffix, and needs FifoQueue=true.");
        return;
    }
    policy_write_t *w = rd_calloc(1, sizeof *w);
    r->state = w;
    r->free_state = policy_write_free;
    w->done = on_created;
    /* An SQS queue: SQS's defaults, its redelivery on a visibility
     * timeout, and no retry budget until a RedrivePolicy gives one. */
    rd_policy_t *p = &w->policy;
    rd_policy_init(p);
    p->lease_seconds = SQS_VISIBILITY_DEFAULT;
    p->message_ttl_s = SQS_RETENTION_DEFAULT;
    snprintf(p->on_expiry, sizeof p->on_expiry, "delete");
    p->max_retries = RD_POLICY_UNLIMITED;
    snprintf(p->lease_expiry, sizeof p->lease_expiry, "redeliver");
    p->sqs = 1;
    if (r->fifo) {
        p->fifo_groups = 1;
        p->content_based_dedup = 0;
    }
    char why[512];
    const rd_sqs_error_t *e = attributes_to_policy(r, attrs, true, p, why, sizeof why);
    if (e) {
        rd_sqs_fail(r, e, "%s", why);
        return;
    }
    w->create = true;
    policy_write_start(r);
}

/* ------------------------------------------------------------ GetQueueUrl */

void rd_sqs_get_queue_url(rd_sqs_req_t *r)
{
    const char *name = rd_sqs_required(r, r->call.params, "QueueName");
    if (name == NULL) return;
    size_t len = strlen(name);
    if (!rd_sqs_queue_name_ok(name, len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
        return;
    }
    r->queue = rd_strndup(name, len);
    r->queue_len = len;
    rd_sqs_queue_exists(r, r->queue, r->queue_len, answer_url);
}

/* ------------------------------------------------------------ ListQueues */

typedef struct list_state {
    char prefix[RD_SQS_QUEUE_NAME_MAX + 1];
    size_t prefix_len;
    bool paged;                 /* MaxResults given: NextToken answers the rest */
} list_state_t;

static void on_listed(const rd_store_page_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    list_state_t *ls = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON *urls = NULL;
    bool ended = res->next_cursor.len == 0;
    for (size_t i = 0; i < res->count; i++) {
        const rd_str_t *n = &res->names[i];
        if (n->len < ls->prefix_len || memcmp(n->ptr, ls->prefix, ls->prefix_len) != 0) {
            ended = true;
            break;
        }
        if (!rd_sqs_queue_name_ok(n->ptr, n->len)) continue;  /* an HTTP-only name */
        char url[512];
        rd_sqs_queue_url(r->sqs, n->ptr, n->len, url, sizeof url);
        if (urls == NULL) urls = cJSON_AddArrayToObject(o, "QueueUrls");
        cJSON_AddItemToArray(urls, cJSON_CreateString(url));
    }
    if (!ended && ls->paged && res->count > 0) {
        const rd_str_t *last = &res->names[res->count - 1];
        unsigned char tok[4 * ((RD_SQS_CURSOR_MAX + 2) / 3) + 1];
        EVP_EncodeBlock(tok, (const unsigned char *)last->ptr, (int)last->len);
        cJSON_AddStringToObject(o, "NextToken", (const char *)tok);
    }
    rd_sqs_answer(r, o);
}

void rd_sqs_list_queues(rd_sqs_req_t *r)
{
    list_state_t *ls = rd_calloc(1, sizeof *ls);
    r->state = ls;
    r->free_state = rd_free;
    const char *prefix = rd_sqs_str(r->call.params, "QueueNamePrefix");
    const char *token = rd_sqs_str(r->call.params, "NextToken");
    long long max = -1;
    if (!rd_sqs_int(r, r->call.params, "MaxResults", 1, SQS_LIST_MAX, &max)) return;
    ls->paged = max > 0;
    if (prefix) {
        ls->prefix_len = strlen(prefix);
        if (ls->prefix_len > RD_SQS_QUEUE_NAME_MAX) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                        "Value for parameter QueueNamePrefix is invalid. Reason: at most 80 "
                        "characters.");
            return;
        }
        memcpy(ls->prefix, prefix, ls->prefix_len);
    }
    char cursor[RD_SQS_CURSOR_MAX];
    size_t clen = 0;
    if (token && token[0]) {
        size_t tlen = strlen(token);
        unsigned char raw[4 * RD_SQS_CURSOR_MAX];
        int n = tlen % 4 == 0 && tlen < sizeof raw
                    ? EVP_DecodeBlock(raw, (const unsigned char *)token, (int)tlen) : -1;
        if (n > 0 && token[tlen - 1] == '=') n--;
        if (n > 0 && token[tlen - 2] == '=') n--;
        if (n <= 0 || (size_t)n > RD_SQS_QUEUE_NAME_MAX) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, "Invalid NextToken value.");
            return;
        }
        memcpy(cursor, raw, (size_t)n);
        clen = (size_t)n;
    } else if (ls->prefix_len > 0) {
        clen = rd_sqs_cursor_before(ls->prefix, ls->prefix_len, cursor);
    }
    rd_sqs_started(r, rd_store_queues_page(r->sqs->store, clen ? cursor : NULL, clen,
                                           max > 0 ? (int)max : SQS_LIST_MAX, on_listed, r));
}

/* ------------------------------------------------------------ attributes */

typedef struct attrs_state {
    unsigned want;
    int pending;
    bool failed;
    rd_store_head_t head;       /* the first failure */
    rd_policy_t policy;
    rd_queue_stats_t stats;
    cJSON *result;
} attrs_state_t;

static void attrs_state_free(void *state)
{
    attrs_state_t *a = state;
    cJSON_Delete(a->result);
    rd_free(a);
}

static void attrs_done(rd_sqs_req_t *r)
{
    attrs_state_t *a = r->state;
    if (--a->pending > 0) return;
    if (a->failed) {
        rd_sqs_store_failed(r, &a->head);
        return;
    }
    cJSON *o = a->result;
    a->result = NULL;
    rd_sqs_answer(r, o);
}

static void on_attrs_policy(const rd_store_policy_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    attrs_state_t *a = r->state;
    if (res->head.status != RD_STORE_OK) {
        if (!a->failed) a->head = (rd_store_head_t){ .status = res->head.status };
        a->failed = true;
    } else {
        a->policy = res->policy;   /* borrowed strings: used only here */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "Attributes", policy_to_attributes(r, a->want & ~(A_VISIBLE |
                                                                    A_NOT_VISIBLE | A_DELAYED),
                                                                    &res->policy, &a->stats));
        if (a->result) {
            /* The stats came first: move their three counts in. */
            cJSON *counts = cJSON_DetachItemFromObject(a->result, "Attributes");
            cJSON *attrs = cJSON_GetObjectItemCaseSensitive(o, "Attributes");
            cJSON *it = counts ? counts->child : NULL;
            while (it) {
                cJSON *next = it->next;
                cJSON_AddItemToObject(attrs, it->string, cJSON_DetachItemViaPointer(counts, it));
                it = next;
            }
            cJSON_Delete(counts);
            cJSON_Delete(a->result);
        }
        a->result = o;
    }
    attrs_done(r);
}

static void on_attrs_stats(const rd_store_stats_result_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    attrs_state_t *a = r->state;
    if (res->head.status != RD_STORE_OK) {
        if (!a->failed) a->head = (rd_store_head_t){ .status = res->head.status };
        a->failed = true;
        attrs_done(r);
        return;
    }
    rd_policy_t none;
    rd_policy_init(&none);
    cJSON *counts = policy_to_attributes(r, a->want & (A_VISIBLE | A_NOT_VISIBLE | A_DELAYED),
                                         &none, &res->stats);
    if (a->result) {
        cJSON *attrs = cJSON_GetObjectItemCaseSensitive(a->result, "Attributes");
        cJSON *it = counts->child;
        while (it) {
            cJSON *next = it->next;
            cJSON_AddItemToObject(attrs, it->string, cJSON_DetachItemViaPointer(counts, it));
            it = next;
        }
        cJSON_Delete(counts);
    } else {
        a->result = cJSON_CreateObject();
        cJSON_AddItemToObject(a->result, "Attributes", counts);
    }
    attrs_done(r);
}

static void on_attrs_exists(rd_sqs_req_t *r)
{
    unsigned want = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r->call.params, "AttributeNames")) {
        if (!cJSON_IsString(it)) continue;
        if (strcmp(it->valuestring, "All") == 0) want |= A_ALL;
        bool known = strcmp(it->valuestring, "All") == 0;
        for (size_t i = 0; i < sizeof QUEUE_ATTRIBUTES / sizeof QUEUE_ATTRIBUTES[0]; i++)
            if (strcmp(it->valuestring, QUEUE_ATTRIBUTES[i].name) == 0) {
                want |= QUEUE_ATTRIBUTES[i].bit;
                known = true;
            }
        if (!known && !attribute_ignored(it->valuestring)) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_ATTRIBUTE_NAME, "Unknown Attribute %.100s.",
                        it->valuestring);
            return;
        }
    }
    if (want == 0) {
        rd_sqs_answer(r, cJSON_CreateObject());
        return;
    }
    attrs_state_t *a = rd_calloc(1, sizeof *a);
    a->want = want;
    a->pending = 2;
    r->state = a;
    r->free_state = attrs_state_free;
    if (rd_store_policy_get(r->sqs->store, rd_sqs_queue(r), on_attrs_policy, r) != 0) {
        rd_sqs_started(r, -1);
        return;
    }
    if (rd_shard_stats(r->sqs->store, rd_sqs_queue(r), 0, on_attrs_stats, r) != 0) {
        a->failed = true;
        a->head = (rd_store_head_t){ .status = RD_STORE_UNAVAILABLE };
        a->pending--;
    }
}

void rd_sqs_get_queue_attributes(rd_sqs_req_t *r)
{
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_attrs_exists);
}

static void on_attributes_set(rd_sqs_req_t *r, const rd_store_policy_t *res)
{
    (void)res;
    rd_sqs_answer(r, NULL);
}

static void on_set_exists(rd_sqs_req_t *r)
{
    policy_write_t *w = rd_calloc(1, sizeof *w);
    r->state = w;
    r->free_state = policy_write_free;
    w->done = on_attributes_set;
    rd_policy_init(&w->policy);
    w->policy.patch = true;
    char why[512];
    const rd_sqs_error_t *e = attributes_to_policy(
        r, cJSON_GetObjectItemCaseSensitive(r->call.params, "Attributes"), false, &w->policy, why,
        sizeof why);
    if (e) {
        rd_sqs_fail(r, e, "%s", why);
        return;
    }
    policy_write_start(r);
}

void rd_sqs_set_queue_attributes(rd_sqs_req_t *r)
{
    if (cJSON_GetObjectItemCaseSensitive(r->call.params, "Attributes") == NULL) {
        rd_sqs_fail(r, &RD_SQS_ERR_MISSING_PARAMETER,
                    "The request must contain the parameter Attribute.Name.");
        return;
    }
    rd_sqs_queue_exists(r, r->queue, r->queue_len, on_set_exists);
}
