/* messages.c - SQS's message actions on retryd's (docs/sqs.md "Messages"):
 * a send is an enqueue, a receive a claim, a delete a succeed with the
 * receive's lease token, a visibility change an extend (or, with 0, a
 * failure with no backoff). SendMessageBatch sends its entries in one
 * enqueue_many call; the other batches run their entries side by side; each
 * answers once, when the last is back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>

#include "retryd/alloc.h"
#include "retryd/enqueue_chunks.h"
#include "retryd/handback.h"
#include "retryd/sqs/attributes.h"
#include "retryd/sqs/codec.h"
#include "retryd/sqs/face.h"

enum { TOKEN_MAX = 128, GROUP_MAX = 128, DEDUP_MAX = 128, BATCH_ID_MAX = 80 };

/* SQS's words for a FIFO send without a deduplication id to a queue
 * without ContentBasedDeduplication. */
#define NO_DEDUP_ID "The queue should either have ContentBasedDeduplication enabled or " \
                    "MessageDeduplicationId provided explicitly"


/* ------------------------------------------------------------ batches */

/* One entry's outcome: its Successful object, or a Failed one. */
typedef struct entry {
    char id[BATCH_ID_MAX + 1];
    cJSON *ok;                  /* the Successful member (Id added at the end) */
    const char *code;           /* failed: the code, message */
    char message[160];
    bool sender;
} entry_t;

typedef struct batch {
    rd_sqs_req_t *r;
    size_t n, pending;
    entry_t e[RD_SQS_BATCH_MAX];
} batch_t;

static void batch_free(void *state)
{
    batch_t *b = state;
    for (size_t i = 0; i < b->n; i++) cJSON_Delete(b->e[i].ok);
    rd_free(b);
}

static void entry_fail(entry_t *e, const rd_sqs_error_t *err, const char *message)
{
    e->code = err->query_code;
    e->sender = err->sender;
    snprintf(e->message, sizeof e->message, "%s", message);
}

/* The answer, once every entry is back: {"Successful": [...], "Failed": [...]}. */
static void batch_done(batch_t *b)
{
    if (--b->pending > 0) return;
    cJSON *res = cJSON_CreateObject();
    cJSON *ok = cJSON_AddArrayToObject(res, "Successful");
    cJSON *failed = cJSON_AddArrayToObject(res, "Failed");
    for (size_t i = 0; i < b->n; i++) {
        entry_t *e = &b->e[i];
        if (e->code == NULL) {
            cJSON *o = e->ok ? e->ok : cJSON_CreateObject();
            e->ok = NULL;
            cJSON_AddStringToObject(o, "Id", e->id);
            cJSON_AddItemToArray(ok, o);
        } else {
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "Id", e->id);
            cJSON_AddBoolToObject(f, "SenderFault", e->sender);
            cJSON_AddStringToObject(f, "Code", e->code);
            cJSON_AddStringToObject(f, "Message", e->message);
            cJSON_AddItemToArray(failed, f);
        }
    }
    rd_sqs_answer(b->r, res);
}

/* The batch's Entries checked as SQS checks them (count, ids, distinct):
 * NULL after failing the request. pending starts at n + 1, so that entries
 * answered at once cannot finish the batch before every one was started;
 * the caller's batch_done after the loop drops that one. */
static batch_t *batch_open(rd_sqs_req_t *r)
{
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(r->call.params, "Entries");
    size_t n = cJSON_IsArray(entries) ? (size_t)cJSON_GetArraySize(entries) : 0;
    if (n == 0) {
        rd_sqs_fail(r, &RD_SQS_ERR_EMPTY_BATCH, "There should be at least one entry in the request.");
        return NULL;
    }
    if (n > RD_SQS_BATCH_MAX) {
        rd_sqs_fail(r, &RD_SQS_ERR_TOO_MANY_ENTRIES,
                    "Maximum number of entries per request are %d. You have sent %zu.",
                    RD_SQS_BATCH_MAX, n);
        return NULL;
    }
    batch_t *b = rd_calloc(1, sizeof *b);
    b->r = r;
    b->n = n;
    b->pending = n + 1;
    r->state = b;
    r->free_state = batch_free;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, entries) {
        const char *id = rd_sqs_str(it, "Id");
        size_t len = id ? strlen(id) : 0;
        bool ok = len > 0 && len <= BATCH_ID_MAX;
        for (size_t j = 0; ok && j < len; j++) {
            char c = id[j];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_';
        }
        if (!ok) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_BATCH_ENTRY_ID,
                        "A batch entry id can only contain alphanumeric characters, hyphens and "
                        "underscores. It can be at most 80 letters long.");
            return NULL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(b->e[j].id, id) == 0) {
                rd_sqs_fail(r, &RD_SQS_ERR_BATCH_IDS_NOT_DISTINCT, "Id %s repeated.", id);
                return NULL;
            }
        memcpy(b->e[i++].id, id, len + 1);
    }
    return b;
}

static const cJSON *batch_entry(const rd_sqs_req_t *r, size_t i)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r->call.params, "Entries"), (int)i);
}

/* ------------------------------------------------------------ sending */

/* One message to send, checked. Strings point into the call's params,
 * attributes into its own buffer. */
typedef struct send {
    const char *body;
    size_t body_len;
    long long delay_ms;         /* -1: none given (the queue's DelaySeconds) */
    const char *group;          /* NULL: none */
    char dedup[DEDUP_MAX + 1];  /* the FIFO deduplication id (or the body's SHA-256), "" none */
    bool content_dedup;         /* dedup is the body's SHA-256 */
    rd_buf_t attributes;        /* packed (attributes.h), empty for none */
    char md5_body[33];
    char md5_attributes[33];    /* "" without attributes */
} send_t;

/* A printable-ASCII id of 1..max characters (MessageGroupId,
 * MessageDeduplicationId). */
static bool ascii_id_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '!' || s[i] > '~') return false;
    return true;
}

/* Reads and checks one send (the request's params or a batch entry).
 * Returns NULL, or the error with why[] (the caller answers it). */
static const rd_sqs_error_t *send_parse(const rd_sqs_req_t *r, const cJSON *in, send_t *s,
                                        char *why, size_t why_len)
{
    memset(s, 0, sizeof *s);
    s->delay_ms = -1;
    s->body = rd_sqs_str(in, "MessageBody");
    if (s->body == NULL) {
        snprintf(why, why_len, "The request must contain the parameter MessageBody.");
        return &RD_SQS_ERR_MISSING_PARAMETER;
    }
    s->body_len = strlen(s->body);
    if (s->body_len == 0) {
        snprintf(why, why_len, "The request must contain the parameter MessageBody.");
        return &RD_SQS_ERR_MISSING_PARAMETER;
    }
    if (!rd_sqs_body_chars_ok(s->body, s->body_len)) {
        snprintf(why, why_len, "Invalid binary character in the message body; see the allowed "
                               "characters in docs/sqs.md.");
        return &RD_SQS_ERR_INVALID_MESSAGE_CONTENTS;
    }
    const cJSON *delay = cJSON_GetObjectItemCaseSensitive(in, "DelaySeconds");
    if (delay && !cJSON_IsNull(delay)) {
        long long d = -1;
        if (cJSON_IsNumber(delay)) d = (long long)delay->valuedouble;
        else if (cJSON_IsString(delay) && delay->valuestring[0]) {
            char *end;
            d = strtoll(delay->valuestring, &end, 10);
            if (*end) d = -1;
        }
        if (d < 0 || d > RD_SQS_DELAY_MAX) {
            snprintf(why, why_len, "Value for parameter DelaySeconds is invalid. Reason: must be "
                                   "from 0 to %d.", RD_SQS_DELAY_MAX);
            return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
        }
        if (r->fifo) {
            snprintf(why, why_len, "Value %lld for parameter DelaySeconds is invalid. Reason: "
                                   "The request include parameter that is not valid for this "
                                   "queue type.", d);
            return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
        }
        s->delay_ms = d * 1000;
    }
    s->group = rd_sqs_str(in, "MessageGroupId");
    if (s->group && !ascii_id_ok(s->group, GROUP_MAX)) {
        snprintf(why, why_len, "Value for parameter MessageGroupId is invalid. Reason: 1-128 "
                               "printable ASCII characters.");
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    }
    const char *dedup = rd_sqs_str(in, "MessageDeduplicationId");
    if (r->fifo) {
        if (s->group == NULL) {
            snprintf(why, why_len, "The request must contain the parameter MessageGroupId.");
            return &RD_SQS_ERR_MISSING_PARAMETER;
        }
        if (dedup) {
            if (!ascii_id_ok(dedup, DEDUP_MAX)) {
                snprintf(why, why_len, "Value for parameter MessageDeduplicationId is invalid. "
                                       "Reason: 1-128 printable ASCII characters.");
                return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
            }
            snprintf(s->dedup, sizeof s->dedup, "%s", dedup);
        } else {
            /* Content-based deduplication: the SHA-256 of the body, if the
             * queue has ContentBasedDeduplication (the enqueue checks). */
            s->content_dedup = true;
            unsigned char d[SHA256_DIGEST_LENGTH];
            SHA256((const unsigned char *)s->body, s->body_len, d);
            for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
                snprintf(s->dedup + 2 * i, 3, "%02x", d[i]);
            s->content_dedup = true;   /* the queue must have ContentBasedDeduplication */
        }
    } else if (dedup) {
        snprintf(why, why_len, "Value for parameter MessageDeduplicationId is invalid. Reason: "
                               "The request includes a parameter that is not valid for this "
                               "queue type.");
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    }
    /* SQS takes one system attribute, AWSTraceHeader (a String); retryd
     * takes it and keeps nothing (docs/sqs.md). */
    const cJSON *sys;
    cJSON_ArrayForEach(sys, cJSON_GetObjectItemCaseSensitive(in, "MessageSystemAttributes")) {
        const char *type = rd_sqs_str(sys, "DataType");
        if (strcmp(sys->string, "AWSTraceHeader") != 0 || type == NULL ||
            strcmp(type, "String") != 0 || rd_sqs_str(sys, "StringValue") == NULL) {
            snprintf(why, why_len, "Message system attribute name '%.64s' is invalid: the only "
                                   "one is AWSTraceHeader, of type String.", sys->string);
            return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
        }
    }
    size_t attr_size = 0;
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(in, "MessageAttributes");
    if (rd_sqs_attributes_pack(attrs, &s->attributes, &attr_size, why, why_len) != 0)
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    if (s->body_len + attr_size > RD_SQS_BODY_MAX) {
        rd_buf_free(&s->attributes);
        snprintf(why, why_len, "One or more parameters are invalid. Reason: Message must be "
                               "shorter than %d bytes.", RD_SQS_BODY_MAX);
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    }
    rd_sqs_md5_hex(s->body, s->body_len, s->md5_body);
    if (s->attributes.len > 0) rd_sqs_md5_hex(s->attributes.data, s->attributes.len, s->md5_attributes);
    return NULL;
}

/* The enqueue of a send (the same store operations as the HTTP API's);
 * its strings are s's. */
static rd_enqueue_t send_item(const send_t *s)
{
    return (rd_enqueue_t){
        .payload = s->body, .len = s->body_len, .max_retries = 0, .delay_ms = s->delay_ms,
        .ttl_ms = -1, .priority = 0, .group = s->group,
        .idempotency_key = s->dedup[0] ? s->dedup : NULL,
        /* SQS deduplicates for 5 minutes. */
        .idempotency_window_ms = s->dedup[0] ? 5 * 60 * 1000 : 0,
        .attributes = s->attributes.len ? s->attributes.data : NULL,
        .attributes_len = s->attributes.len, .must_exist = true, .record_first_receive = true,
        .content_dedup = s->content_dedup,
    };
}

static int send_enqueue(rd_sqs_req_t *r, const send_t *s, rd_store_messages_cb cb, void *arg)
{
    rd_enqueue_t e = send_item(s);
    if (r->sqs->enqueues) return rd_enqueue_lines_enqueue(r->sqs->enqueues, rd_sqs_queue(r), &e, cb, arg);
    return rd_store_enqueue(r->sqs->store, rd_sqs_queue(r), &e, cb, arg);
}

/* What a send answers: MessageId, the MD5s, SequenceNumber on FIFO. */
static cJSON *send_result(const rd_sqs_req_t *r, const send_t *s, long long id)
{
    cJSON *o = cJSON_CreateObject();
    char mid[37];
    rd_sqs_message_id(r->queue, r->queue_len, id, mid);
    cJSON_AddStringToObject(o, "MessageId", mid);
    cJSON_AddStringToObject(o, "MD5OfMessageBody", s->md5_body);
    if (s->md5_attributes[0]) cJSON_AddStringToObject(o, "MD5OfMessageAttributes", s->md5_attributes);
    if (r->fifo) {
        char seq[24];
        snprintf(seq, sizeof seq, "%020lld", id);
        cJSON_AddStringToObject(o, "SequenceNumber", seq);
    }
    return o;
}

/* A new pending message wakes the long polls of this instance (other
 * instances learn of it from Redis, docs/long-poll.md). */
static void wake_waiters(rd_sqs_req_t *r, const rd_message_t *m)
{
    if (r->sqs->waiters && m->status == RD_STATUS_PENDING && m->retry_after_ms < 0)
        rd_waiters_notify(r->sqs->waiters, rd_sqs_queue(r));
}

typedef struct send_state {
    send_t s;
} send_state_t;

static void send_state_free(void *state)
{
    send_state_t *st = state;
    rd_buf_free(&st->s.attributes);
    rd_free(st);
}

static void on_sent(const rd_store_messages_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    send_state_t *st = r->state;
    if (res->head.status == RD_STORE_NOT_FOUND) {
        rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
        return;
    }
    if (res->head.status == RD_STORE_TOO_LARGE) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "One or more parameters are invalid. Reason: Message must be shorter than "
                    "%lld bytes.", res->payload_limit);
        return;
    }
    if (res->head.status == RD_STORE_INVALID_STATE) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, "%s", NO_DEDUP_ID);
        return;
    }
    /* A duplicate (FIFO deduplication) answers the original's id. */
    if (res->head.status != RD_STORE_DUPLICATE && rd_sqs_store_failed(r, &res->head)) return;
    if (res->count < 1) {
        rd_store_head_t bad = { .status = RD_STORE_ERROR };
        rd_sqs_store_failed(r, &bad);
        return;
    }
    if (res->head.status == RD_STORE_OK) wake_waiters(r, &res->messages[0]);
    rd_sqs_answer(r, send_result(r, &st->s, res->messages[0].id));
}

void rd_sqs_send_message(rd_sqs_req_t *r)
{
    send_state_t *st = rd_calloc(1, sizeof *st);
    r->state = st;
    r->free_state = send_state_free;
    char why[256];
    const rd_sqs_error_t *e = send_parse(r, r->call.params, &st->s, why, sizeof why);
    if (e) {
        rd_sqs_fail(r, e, "%s", why);
        return;
    }
    rd_sqs_started(r, send_enqueue(r, &st->s, on_sent, r));
}

/* SendMessageBatch: the valid entries in one enqueue_many call
 * (enqueue_chunks.c sends more only when the originals of duplicates fill
 * its reply); each answered as SendMessage answers it. */
typedef struct send_batch {
    batch_t *b;
    size_t n;                           /* entries sent ... */
    size_t entry[RD_SQS_BATCH_MAX];     /* ... sent item i is entry entry[i] */
    send_t s[RD_SQS_BATCH_MAX];         /* by entry */
    rd_enqueue_t items[RD_SQS_BATCH_MAX];
} send_batch_t;

static void send_batch_free(send_batch_t *sb)
{
    for (size_t i = 0; i < sb->b->n; i++) rd_buf_free(&sb->s[i].attributes);
    rd_free(sb);
}

/* One entry's enqueue, answered as SendMessage answers it (on_sent). */
static void entry_sent(send_batch_t *sb, size_t i, const rd_store_messages_t *res)
{
    batch_t *b = sb->b;
    entry_t *e = &b->e[i];
    rd_store_status_t st = res->head.status;
    if (st == RD_STORE_NOT_FOUND) {
        entry_fail(e, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
    } else if (st == RD_STORE_INVALID_STATE) {
        entry_fail(e, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, NO_DEDUP_ID);
    } else if (st == RD_STORE_TOO_LARGE) {
        entry_fail(e, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, "Message is larger than the queue's "
                                                           "MaximumMessageSize.");
    } else if ((st == RD_STORE_OK || st == RD_STORE_DUPLICATE) && res->count > 0) {
        if (st == RD_STORE_OK) wake_waiters(b->r, &res->messages[0]);
        e->ok = send_result(b->r, &sb->s[i], res->messages[0].id);
    } else {
        entry_fail(e, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "Redis is not reachable; retry.");
    }
}

static void on_batch_chunk(size_t first, const rd_store_enqueued_many_t *res, void *arg)
{
    send_batch_t *sb = arg;
    for (size_t k = 0; k < res->count; k++) entry_sent(sb, sb->entry[first + k], &res->items[k]);
}

static void on_batch_sent(size_t done, const rd_store_head_t *failure, size_t in_call, void *arg)
{
    (void)failure, (void)in_call;
    send_batch_t *sb = arg;
    batch_t *b = sb->b;
    /* A failed call's entries and those after it: not (known to be) sent. */
    for (size_t k = done; k < sb->n; k++)
        entry_fail(&b->e[sb->entry[k]], &RD_SQS_ERR_SERVICE_UNAVAILABLE,
                   "Redis is not reachable; retry.");
    send_batch_free(sb);
    batch_done(b);
}

void rd_sqs_send_message_batch(rd_sqs_req_t *r)
{
    batch_t *b = batch_open(r);
    if (b == NULL) return;
    /* The batch is at most 256 KiB in all, as SQS counts it. */
    size_t total = 0;
    for (size_t i = 0; i < b->n; i++) {
        const char *body = rd_sqs_str(batch_entry(r, i), "MessageBody");
        total += body ? strlen(body) : 0;
    }
    if (total > RD_SQS_BODY_MAX) {
        rd_sqs_fail(r, &RD_SQS_ERR_BATCH_TOO_LONG,
                    "Batch requested message too long. The sum of the messages is %zu bytes; "
                    "at most %d.", total, RD_SQS_BODY_MAX);
        return;
    }
    send_batch_t *sb = rd_calloc(1, sizeof *sb);
    sb->b = b;
    for (size_t i = 0; i < b->n; i++) {
        char why[160];
        const rd_sqs_error_t *e = send_parse(r, batch_entry(r, i), &sb->s[i], why, sizeof why);
        if (e) {
            entry_fail(&b->e[i], e, why);
            continue;
        }
        sb->entry[sb->n] = i;
        sb->items[sb->n++] = send_item(&sb->s[i]);
    }
    /* pending is n + 1 (batch_open): the sends answer together, once. */
    b->pending = 1;
    if (sb->n > 0 && rd_enqueue_chunks(r->sqs->store, rd_sqs_queue(r), sb->items, sb->n,
                                       on_batch_chunk, on_batch_sent, sb) == 0)
        return;
    on_batch_sent(0, NULL, 0, sb);
}

/* ------------------------------------------------------------ receiving */

/* Which attributes a receive asked for. */
typedef struct receive {
    bool all_system;
    unsigned system;            /* SYS_* bits */
    bool all_attributes;
    const cJSON *attribute_names;   /* MessageAttributeNames (exact or "prefix.*") */
    long long wait_ms;          /* -1: none given */
    int count;
    rd_lease_t lease;
    bool parked;
} receive_t;

enum {
    SYS_SENT = 1, SYS_RECEIVE_COUNT = 2, SYS_FIRST_RECEIVE = 4, SYS_SENDER = 8,
    SYS_GROUP = 16, SYS_DEDUP = 32, SYS_SEQUENCE = 64,
};

static const struct { const char *name; unsigned bit; } SYSTEM_ATTRIBUTES[] = {
    { "SentTimestamp", SYS_SENT },
    { "ApproximateReceiveCount", SYS_RECEIVE_COUNT },
    { "ApproximateFirstReceiveTimestamp", SYS_FIRST_RECEIVE },
    { "SenderId", SYS_SENDER },
    { "MessageGroupId", SYS_GROUP },
    { "MessageDeduplicationId", SYS_DEDUP },
    { "SequenceNumber", SYS_SEQUENCE },
};

static void want_system(receive_t *rc, const cJSON *names)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, names) {
        if (!cJSON_IsString(it)) continue;
        if (strcmp(it->valuestring, "All") == 0) rc->all_system = true;
        for (size_t i = 0; i < sizeof SYSTEM_ATTRIBUTES / sizeof SYSTEM_ATTRIBUTES[0]; i++)
            if (strcmp(it->valuestring, SYSTEM_ATTRIBUTES[i].name) == 0)
                rc->system |= SYSTEM_ATTRIBUTES[i].bit;
    }
}

/* MessageAttributeNames: "All" or ".*", a "prefix.*", or a name. */
static bool want_attribute(const char *name, void *arg)
{
    const receive_t *rc = arg;
    if (rc->all_attributes) return true;
    const cJSON *it;
    cJSON_ArrayForEach(it, rc->attribute_names) {
        if (!cJSON_IsString(it)) continue;
        const char *w = it->valuestring;
        size_t n = strlen(w);
        if (n >= 2 && strcmp(w + n - 2, ".*") == 0) {
            if (strncmp(name, w, n - 1) == 0) return true;
        } else if (strcmp(name, w) == 0) {
            return true;
        }
    }
    return false;
}

static void add_ms(cJSON *attrs, const char *name, long long v)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", v);
    cJSON_AddStringToObject(attrs, name, s);
}

/* One received message in SQS's shape. */
static cJSON *received_message(rd_sqs_req_t *r, const receive_t *rc, const rd_message_t *m,
                               long long now_ms)
{
    cJSON *o = cJSON_CreateObject();
    char mid[37], md5[33];
    rd_sqs_message_id(r->queue, r->queue_len, m->id, mid);
    cJSON_AddStringToObject(o, "MessageId", mid);
    rd_buf_t handle = RD_BUF_INIT;
    rd_sqs_handle_encode(r->queue, r->queue_len, m->id,
                         m->lease_token.ptr ? m->lease_token.ptr : "", m->lease_token.len, &handle);
    rd_buf_append(&handle, "", 1);
    cJSON_AddStringToObject(o, "ReceiptHandle", handle.data);
    rd_buf_free(&handle);
    /* The body as the answer carries it, and its digest: a message the HTTP
     * API (or redis-cli) enqueued may hold what SQS would not have taken
     * (control characters, U+FFFF, in XML; bytes that are not UTF-8), and
     * the client checks MD5OfBody against the body it reads. */
    rd_buf_t body = RD_BUF_INIT;
    rd_sqs_wire_text(r->call.protocol, m->payload.ptr ? m->payload.ptr : "", m->payload.len, &body);
    rd_sqs_md5_hex(body.data, body.len, md5);
    cJSON_AddStringToObject(o, "MD5OfBody", md5);
    cJSON_AddStringToObject(o, "Body", body.data);
    rd_buf_free(&body);
    unsigned sys = rc->all_system ? ~0u : rc->system;
    if (sys) {
        cJSON *a = cJSON_AddObjectToObject(o, "Attributes");
        if (sys & SYS_SENT) add_ms(a, "SentTimestamp", m->created_at_ms);
        if (sys & SYS_RECEIVE_COUNT) add_ms(a, "ApproximateReceiveCount", m->retry_count + 1LL);
        if (sys & SYS_FIRST_RECEIVE)
            add_ms(a, "ApproximateFirstReceiveTimestamp",
                   m->first_received_at_ms >= 0 ? m->first_received_at_ms : now_ms);
        if (sys & SYS_SENDER) cJSON_AddStringToObject(a, "SenderId", r->sqs->account);
        if ((sys & SYS_GROUP) && m->group.ptr) {
            char *g = rd_strndup(m->group.ptr, m->group.len);
            cJSON_AddStringToObject(a, "MessageGroupId", g);
            rd_free(g);
        }
        if ((sys & SYS_DEDUP) && r->fifo && m->idempotency_key.ptr) {
            char *k = rd_strndup(m->idempotency_key.ptr, m->idempotency_key.len);
            cJSON_AddStringToObject(a, "MessageDeduplicationId", k);
            rd_free(k);
        }
        if ((sys & SYS_SEQUENCE) && r->fifo) {
            char seq[24];
            snprintf(seq, sizeof seq, "%020lld", m->id);
            cJSON_AddStringToObject(a, "SequenceNumber", seq);
        }
    }
    if (m->attributes.ptr && m->attributes.len > 0 &&
        (rc->all_attributes || cJSON_GetArraySize(rc->attribute_names) > 0)) {
        cJSON *attrs = rd_sqs_attributes_unpack(m->attributes.ptr, m->attributes.len,
                                                want_attribute, (void *)rc);
        if (attrs && cJSON_GetArraySize(attrs) > 0) {
            rd_buf_t sel = RD_BUF_INIT;
            rd_sqs_attributes_select(m->attributes.ptr, m->attributes.len, want_attribute,
                                     (void *)rc, &sel);
            rd_sqs_md5_hex(sel.data ? sel.data : "", sel.len, md5);
            rd_buf_free(&sel);
            cJSON_AddStringToObject(o, "MD5OfMessageAttributes", md5);
            cJSON_AddItemToObject(o, "MessageAttributes", attrs);
        } else {
            cJSON_Delete(attrs);
        }
    }
    return o;
}

static void receive_wait(rd_sqs_req_t *r, long long wait_ms);

static void on_received(const rd_store_messages_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    receive_t *rc = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    if (res->count == 0) {
        if (!res->queue_known) {
            rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
            return;
        }
        /* Nothing now: wait WaitTimeSeconds, else the queue's
         * ReceiveMessageWaitTimeSeconds (the first claim said whether the
         * queue exists; a parked one is answered when the wait ends). */
        long long wait = rc->wait_ms >= 0 ? rc->wait_ms : res->policy_wait_ms;
        if (!rc->parked && wait > 0 && r->sqs->waiters) {
            receive_wait(r, wait);
            return;
        }
        rd_sqs_answer(r, cJSON_CreateObject());
        return;
    }
    rd_handback_if_undelivered(r->ex, &r->sqs->store, rd_sqs_queue(r), res->messages, res->count);
    cJSON *out = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(out, "Messages");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    for (size_t i = 0; i < res->count; i++)
        cJSON_AddItemToArray(list, received_message(r, rc, &res->messages[i], now_ms));
    rd_sqs_answer(r, out);
}

static void on_received_together(const rd_store_settled_t *res, void *arg)
{
    rd_store_messages_t claimed = { .head = res->head, .messages = res->messages,
                                    .count = res->count, .queue_known = res->queue_known,
                                    .policy_wait_ms = res->policy_wait_ms };
    on_received(&claimed, arg);
}

static void receive_wait(rd_sqs_req_t *r, long long wait_ms)
{
    receive_t *rc = r->state;
    rc->parked = true;
    rd_waiters_park(r->sqs->waiters, rd_sqs_queue(r), rc->lease, rc->count, NULL, wait_ms, r->ex,
                    on_received, r);
}

void rd_sqs_receive_message(rd_sqs_req_t *r)
{
    receive_t *rc = rd_calloc(1, sizeof *rc);
    r->state = rc;
    r->free_state = rd_free;
    const cJSON *p = r->call.params;
    long long count = 1, visibility = -1, wait = -1;
    if (!rd_sqs_int(r, p, "MaxNumberOfMessages", 1, RD_SQS_BATCH_MAX, &count)) return;
    if (!rd_sqs_int(r, p, "VisibilityTimeout", 0, RD_SQS_VISIBILITY_MAX, &visibility)) return;
    if (!rd_sqs_int(r, p, "WaitTimeSeconds", 0, RD_SQS_WAIT_MAX, &wait)) return;
    want_system(rc, cJSON_GetObjectItemCaseSensitive(p, "AttributeNames"));
    want_system(rc, cJSON_GetObjectItemCaseSensitive(p, "MessageSystemAttributeNames"));
    rc->attribute_names = cJSON_GetObjectItemCaseSensitive(p, "MessageAttributeNames");
    const cJSON *it;
    cJSON_ArrayForEach(it, rc->attribute_names)
        if (cJSON_IsString(it) && (strcmp(it->valuestring, "All") == 0 ||
                                   strcmp(it->valuestring, ".*") == 0))
            rc->all_attributes = true;
    rc->count = (int)count;
    rc->wait_ms = wait < 0 ? -1 : wait * 1000;
    /* VisibilityTimeout 0 is served as retryd's shortest lease, 1 s
     * (docs/sqs.md "Attributes and the policy"). */
    rc->lease.ms = visibility < 0 ? r->sqs->default_lease_ms
                                  : (visibility == 0 ? 1000 : visibility * 1000);
    rc->lease.given = visibility >= 0;
    rd_sqs_started(r, r->sqs->coalescer
                          ? rd_coalescer_settle_claim(r->sqs->coalescer, rd_sqs_queue(r),
                                                      rc->lease, rc->count, NULL, 0, NULL,
                                                      on_received_together, r)
                          : rd_store_claim(r->sqs->store, rd_sqs_queue(r), rc->lease, rc->count,
                                           NULL, on_received, r));
}

/* ------------------------------------------------------------ deleting */

/* A receipt handle's id and lease token. */
typedef struct handle {
    long long id;
    char token[TOKEN_MAX];
} handle_t;

static bool handle_read(const rd_sqs_req_t *r, const cJSON *in, handle_t *h)
{
    const char *s = rd_sqs_str(in, "ReceiptHandle");
    return s && rd_sqs_handle_decode(s, r->queue, r->queue_len, &h->id, h->token, sizeof h->token);
}

static void on_deleted(const rd_store_messages_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    switch (res->head.status) {
    case RD_STORE_NOT_FOUND:       /* gone already */
    case RD_STORE_INVALID_STATE:   /* finished, or visible again */
    case RD_STORE_LEASE_MISMATCH:  /* received again since: SQS deletes nothing, succeeds */
        rd_sqs_answer(r, NULL);
        return;
    default:
        if (rd_sqs_store_failed(r, &res->head)) return;
        rd_sqs_answer(r, NULL);
    }
}

void rd_sqs_delete_message(rd_sqs_req_t *r)
{
    handle_t *h = rd_calloc(1, sizeof *h);
    r->state = h;
    r->free_state = rd_free;
    if (rd_sqs_required(r, r->call.params, "ReceiptHandle") == NULL) return;
    if (!handle_read(r, r->call.params, h)) {
        rd_sqs_fail(r, &RD_SQS_ERR_RECEIPT_HANDLE_INVALID,
                    "The input receipt handle is invalid.");
        return;
    }
    rd_sqs_started(r, rd_store_succeed(r->sqs->store, rd_sqs_queue(r), h->id, h->token,
                                       on_deleted, r));
}

typedef struct delete_batch {
    batch_t *b;
    size_t n;
    size_t index[RD_SQS_BATCH_MAX];        /* entry of item i */
    rd_settlement_t items[RD_SQS_BATCH_MAX];
    handle_t handles[RD_SQS_BATCH_MAX];
} delete_batch_t;

static void on_batch_deleted(const rd_store_settled_t *res, void *arg)
{
    delete_batch_t *d = arg;
    batch_t *b = d->b;
    /* Every outcome is a success in SQS's terms (as DeleteMessage's). */
    if (res->head.status != RD_STORE_OK)
        for (size_t i = 0; i < d->n; i++)
            entry_fail(&b->e[d->index[i]], &RD_SQS_ERR_SERVICE_UNAVAILABLE,
                       "Redis is not reachable; retry.");
    rd_free(d);
    b->pending = 1;
    batch_done(b);
}

void rd_sqs_delete_message_batch(rd_sqs_req_t *r)
{
    batch_t *b = batch_open(r);
    if (b == NULL) return;
    delete_batch_t *d = rd_calloc(1, sizeof *d);
    d->b = b;
    for (size_t i = 0; i < b->n; i++) {
        handle_t *h = &d->handles[d->n];
        if (!handle_read(r, batch_entry(r, i), h)) {
            entry_fail(&b->e[i], &RD_SQS_ERR_RECEIPT_HANDLE_INVALID,
                       "The input receipt handle is invalid.");
            continue;
        }
        d->index[d->n] = i;
        d->items[d->n] = (rd_settlement_t){ .id = h->id, .lease_token = h->token };
        d->n++;
    }
    if (d->n == 0) {
        rd_free(d);
        b->pending = 1;
        batch_done(b);
        return;
    }
    int rc = r->sqs->coalescer
                 ? rd_coalescer_settle_claim(r->sqs->coalescer, rd_sqs_queue(r),
                                             (rd_lease_t){ r->sqs->default_lease_ms, false }, 0,
                                             NULL, d->n, d->items, on_batch_deleted, d)
                 : rd_store_settle_claim(r->sqs->store, rd_sqs_queue(r),
                                         (rd_lease_t){ r->sqs->default_lease_ms, false }, 0, NULL,
                                         d->n, d->items, on_batch_deleted, d);
    if (rc != 0) {
        rd_free(d);
        rd_sqs_started(r, rc);
    }
}

/* ------------------------------------------------------------ visibility */

/* What a visibility change answered: NULL (done) or the error. */
static const rd_sqs_error_t *visibility_error(const rd_store_head_t *head, const char **message)
{
    switch (head->status) {
    case RD_STORE_OK:
        return NULL;
    case RD_STORE_NOT_FOUND:
    case RD_STORE_INVALID_STATE:
        *message = "Message does not exist or is not available for visibility timeout change.";
        return &RD_SQS_ERR_MESSAGE_NOT_INFLIGHT;
    case RD_STORE_LEASE_MISMATCH:
        *message = "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle "
                   "has expired.";
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    default:
        *message = "Redis is not reachable; retry.";
        return &RD_SQS_ERR_SERVICE_UNAVAILABLE;
    }
}

/* One change: timeout > 0 extends the lease from now; 0 makes the message
 * visible at once, counted as a receive that did not delete (a failure with
 * no backoff, docs/sqs.md). */
static int visibility_change(rd_sqs_req_t *r, const handle_t *h, long long timeout_s,
                             rd_store_messages_cb cb, void *arg)
{
    if (timeout_s > 0) {
        rd_lease_t lease = { timeout_s * 1000, true };
        return rd_store_extend(r->sqs->store, rd_sqs_queue(r), h->id, h->token, lease, cb, arg);
    }
    return rd_store_fail(r->sqs->store, rd_sqs_queue(r), h->id, h->token, "visibility released",
                         true, 0, cb, arg);
}

static void on_visibility(const rd_store_messages_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    const char *message = NULL;
    const rd_sqs_error_t *e = visibility_error(&res->head, &message);
    if (e) {
        if (e == &RD_SQS_ERR_SERVICE_UNAVAILABLE && rd_sqs_store_failed(r, &res->head)) return;
        rd_sqs_fail(r, e, "%s", message);
        return;
    }
    if (res->count > 0 && r->sqs->waiters) wake_waiters(r, &res->messages[0]);
    rd_sqs_answer(r, NULL);
}

/* The handle and the timeout of one change (the request's or an entry's). */
static const rd_sqs_error_t *visibility_parse(const rd_sqs_req_t *r, const cJSON *in, handle_t *h,
                                              long long *timeout, const char **message)
{
    if (rd_sqs_str(in, "ReceiptHandle") == NULL) {
        *message = "The request must contain the parameter ReceiptHandle.";
        return &RD_SQS_ERR_MISSING_PARAMETER;
    }
    if (!handle_read(r, in, h)) {
        *message = "The input receipt handle is invalid.";
        return &RD_SQS_ERR_RECEIPT_HANDLE_INVALID;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, "VisibilityTimeout");
    long long t = -1;
    if (cJSON_IsNumber(v)) t = (long long)v->valuedouble;
    else if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        t = strtoll(v->valuestring, &end, 10);
        if (*end) t = -1;
    } else if (v == NULL) {
        *message = "The request must contain the parameter VisibilityTimeout.";
        return &RD_SQS_ERR_MISSING_PARAMETER;
    }
    if (t < 0 || t > RD_SQS_VISIBILITY_MAX) {
        *message = "Value for parameter VisibilityTimeout is invalid. Reason: must be from 0 to "
                   "43200.";
        return &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
    }
    *timeout = t;
    return NULL;
}

void rd_sqs_change_message_visibility(rd_sqs_req_t *r)
{
    handle_t *h = rd_calloc(1, sizeof *h);
    r->state = h;
    r->free_state = rd_free;
    long long timeout = 0;
    const char *message = NULL;
    const rd_sqs_error_t *e = visibility_parse(r, r->call.params, h, &timeout, &message);
    if (e) {
        rd_sqs_fail(r, e, "%s", message);
        return;
    }
    rd_sqs_started(r, visibility_change(r, h, timeout, on_visibility, r));
}

typedef struct visibility_slot {
    batch_t *b;
    size_t i;
    handle_t h;
} visibility_slot_t;

static void on_batch_visibility(const rd_store_messages_t *res, void *arg)
{
    visibility_slot_t *slot = arg;
    const char *message = NULL;
    const rd_sqs_error_t *e = visibility_error(&res->head, &message);
    if (e) entry_fail(&slot->b->e[slot->i], e, message);
    else if (res->count > 0) wake_waiters(slot->b->r, &res->messages[0]);
    batch_t *b = slot->b;
    rd_free(slot);
    batch_done(b);
}

void rd_sqs_change_message_visibility_batch(rd_sqs_req_t *r)
{
    batch_t *b = batch_open(r);
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) {
        visibility_slot_t *slot = rd_calloc(1, sizeof *slot);
        slot->b = b;
        slot->i = i;
        long long timeout = 0;
        const char *message = NULL;
        const rd_sqs_error_t *e = visibility_parse(r, batch_entry(r, i), &slot->h, &timeout, &message);
        if (e == NULL && visibility_change(r, &slot->h, timeout, on_batch_visibility, slot) == 0)
            continue;
        entry_fail(&b->e[i], e ? e : &RD_SQS_ERR_SERVICE_UNAVAILABLE,
                   e ? message : "Redis is not reachable; retry.");
        rd_free(slot);
        b->pending--;
    }
    batch_done(b);
}
