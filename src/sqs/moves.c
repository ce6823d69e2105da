/* sqs/moves.c - StartMessageMoveTask, ListMessageMoveTasks and
 * CancelMessageMoveTask (docs/sqs.md "Message move tasks"): the task runs
 * in src/moves.c, its state is read and changed through the store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/sqs/face.h"

/* What an action keeps between its calls (r->state). */
typedef struct move_state {
    char source[RD_SQS_QUEUE_NAME_MAX + 1], dest[RD_SQS_QUEUE_NAME_MAX + 1];
    size_t source_len, dest_len;
    long long rate;             /* 0: not given */
    long long max;              /* ListMessageMoveTasks' MaxResults */
    long long task;             /* CancelMessageMoveTask's task id */
    bool checking_dest;         /* the existence asked about is the destination's */
    void (*then)(rd_sqs_req_t *r);
} move_state_t;

static rd_store_queue_t source_of(const move_state_t *s)
{
    return (rd_store_queue_t){ .name = s->source, .len = s->source_len };
}

static void not_found(rd_sqs_req_t *r, const char *param)
{
    rd_sqs_fail(r, &RD_SQS_ERR_RESOURCE_NOT_FOUND,
                "The resource that you specified for the %s parameter doesn't exist.", param);
}

/* The queue of name[0..len) into out (RD_SQS_QUEUE_NAME_MAX + 1 bytes),
 * checked as the request's key allows; false after failing the request. */
static bool keep_queue(rd_sqs_req_t *r, const char *param, const char *name, size_t len,
                       char *out, size_t *out_len)
{
    if (name == NULL || !rd_sqs_queue_name_ok(name, len)) {
        not_found(r, param);
        return false;
    }
    if (r->key && !rd_sqs_key_allows(r->key, name, len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_ACCESS_DENIED, "The key %s is not allowed to use queue %.*s.",
                    rd_sqs_key_id(r->key), (int)len, name);
        return false;
    }
    memcpy(out, name, len);
    out[len] = '\0';
    *out_len = len;
    return true;
}

/* An ARN parameter's queue; as keep_queue. */
static bool arn_queue(rd_sqs_req_t *r, const char *param, const char *arn, char *out,
                      size_t *out_len)
{
    size_t len = 0;
    const char *name = rd_sqs_name_of_arn(r->sqs, arn, &len);
    return keep_queue(r, param, name, len, out, out_len);
}

static move_state_t *new_state(rd_sqs_req_t *r)
{
    move_state_t *s = rd_calloc(1, sizeof *s);
    r->state = s;
    r->free_state = rd_free;
    return s;
}

/* ------------------------------------------------------------ does it exist */

static void on_exists_page(const rd_store_page_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    move_state_t *s = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    const char *name = s->checking_dest ? s->dest : s->source;
    size_t len = s->checking_dest ? s->dest_len : s->source_len;
    if (!(res->count > 0 && res->names[0].len == len && memcmp(res->names[0].ptr, name, len) == 0)) {
        not_found(r, s->checking_dest ? "DestinationArn" : "SourceArn");
        return;
    }
    s->then(r);
}

/* Runs then(r) once the registry has the source (or, with dest, the
 * destination); a queue it lacks is ResourceNotFoundException. */
static void check_exists(rd_sqs_req_t *r, bool dest, void (*then)(rd_sqs_req_t *r))
{
    move_state_t *s = r->state;
    s->checking_dest = dest;
    s->then = then;
    char cursor[RD_SQS_CURSOR_MAX];
    size_t clen = dest ? rd_sqs_cursor_before(s->dest, s->dest_len, cursor)
                       : rd_sqs_cursor_before(s->source, s->source_len, cursor);
    rd_sqs_started(r, rd_store_queues_page(r->sqs->store, cursor, clen, 1, on_exists_page, r));
}

/* The handle: names.c's receipt-handle form with the task id and the source
 * queue for the token, under the tag of no queue (a TaskHandle names its
 * queue itself). */
static void task_handle(const char *source, size_t len, long long id, rd_buf_t *out)
{
    rd_sqs_handle_encode("", 0, id, source, len, out);
}

/* ------------------------------------------------------------ StartMessageMoveTask */

static void on_task_started(const rd_moves_started_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    move_state_t *s = r->state;
    rd_store_head_t head = { .status = res->status };
    if (rd_sqs_store_failed(r, &head)) return;
    if (res->running) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "There is already a task running. Only one active task is allowed for a "
                    "source queue arn at a given time.");
        return;
    }
    rd_buf_t handle = RD_BUF_INIT;
    task_handle(s->source, s->source_len, res->id, &handle);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "TaskHandle", handle.data ? handle.data : "");
    rd_buf_free(&handle);
    rd_sqs_answer(r, o);
}

static void start_task(rd_sqs_req_t *r)
{
    move_state_t *s = r->state;
    if (r->sqs->moves == NULL) {
        rd_sqs_fail(r, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "The daemon is shutting down; retry.");
        return;
    }
    rd_store_queue_t dest = { .name = s->dest, .len = s->dest_len };
    if (rd_moves_start(r->sqs->moves, source_of(s), dest, s->rate, on_task_started, r) != 0)
        rd_sqs_fail(r, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "Redis is not reachable; retry.");
}

/* The source must be a dead-letter queue: some queue's RedrivePolicy names
 * it (the registry's links, paged until one is found or the walk ends). */
static void on_sources(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    move_state_t *s = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    if (res->count > 1) {
        start_task(r);
        return;
    }
    const rd_str_t *next = res->count > 0 ? &res->strings[0] : NULL;
    if (next == NULL || next->ptr == NULL || (next->len == 1 && next->ptr[0] == '0') ||
        next->len >= 32) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                    "Source queue must be configured as a Dead Letter Queue.");
        return;
    }
    char cursor[32];
    memcpy(cursor, next->ptr, next->len);
    cursor[next->len] = '\0';
    rd_sqs_started(r, rd_store_dlq_sources(r->sqs->store, source_of(s), cursor, 1000, on_sources, r));
}

static void check_sources(rd_sqs_req_t *r)
{
    move_state_t *s = r->state;
    rd_sqs_started(r, rd_store_dlq_sources(r->sqs->store, source_of(s), NULL, 1000, on_sources, r));
}

static void start_source_exists(rd_sqs_req_t *r)
{
    move_state_t *s = r->state;
    if (s->dest_len > 0) check_exists(r, true, check_sources);
    else check_sources(r);
}

void rd_sqs_start_message_move_task(rd_sqs_req_t *r)
{
    const cJSON *p = r->call.params;
    const char *src = rd_sqs_required(r, p, "SourceArn");
    if (src == NULL) return;
    long long rate = 0;
    if (!rd_sqs_int(r, p, "MaxNumberOfMessagesPerSecond", 1, RD_STORE_MOVE_RATE_MAX, &rate)) return;
    move_state_t *s = new_state(r);
    s->rate = rate;
    if (!arn_queue(r, "SourceArn", src, s->source, &s->source_len)) return;
    const char *dest = rd_sqs_str(p, "DestinationArn");
    if (dest && dest[0]) {
        if (!arn_queue(r, "DestinationArn", dest, s->dest, &s->dest_len)) return;
        if (s->dest_len == s->source_len && memcmp(s->dest, s->source, s->dest_len) == 0) {
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE,
                        "The destination queue must not be the source queue.");
            return;
        }
    }
    check_exists(r, false, start_source_exists);
}

/* ------------------------------------------------------------ ListMessageMoveTasks */

static void on_listed(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    move_state_t *s = r->state;
    if (rd_sqs_store_failed(r, &res->head)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON *results = cJSON_AddArrayToObject(o, "Results");
    char arn[512];
    rd_sqs_queue_arn(r->sqs, s->source, s->source_len, arn, sizeof arn);
    for (size_t at = 0; at + RD_STORE_MOVE_TASK_FIELDS <= res->count;
         at += RD_STORE_MOVE_TASK_FIELDS) {
        rd_store_move_task_t t;
        if (!rd_store_move_task_at(res, at, &t)) continue;
        cJSON *e = cJSON_CreateObject();
        char status[16] = "";
        snprintf(status, sizeof status, "%.*s", (int)t.status.len, t.status.ptr);
        if (strcmp(status, "RUNNING") == 0) {
            rd_buf_t handle = RD_BUF_INIT;
            task_handle(s->source, s->source_len, t.id, &handle);
            cJSON_AddStringToObject(e, "TaskHandle", handle.data ? handle.data : "");
            rd_buf_free(&handle);
        }
        cJSON_AddStringToObject(e, "Status", status);
        cJSON_AddStringToObject(e, "SourceArn", arn);
        if (t.destination.len > 0) {
            char dest[512];
            rd_sqs_queue_arn(r->sqs, t.destination.ptr, t.destination.len, dest, sizeof dest);
            cJSON_AddStringToObject(e, "DestinationArn", dest);
        }
        if (t.rate > 0) cJSON_AddNumberToObject(e, "MaxNumberOfMessagesPerSecond", (double)t.rate);
        cJSON_AddNumberToObject(e, "ApproximateNumberOfMessagesMoved", (double)t.moved);
        cJSON_AddNumberToObject(e, "ApproximateNumberOfMessagesToMove", (double)t.to_move);
        if (t.reason.len > 0) {
            char *reason = rd_strndup(t.reason.ptr, t.reason.len);
            cJSON_AddStringToObject(e, "FailureReason", reason);
            rd_free(reason);
        }
        cJSON_AddNumberToObject(e, "StartedTimestamp", (double)t.started_ms);
        cJSON_AddItemToArray(results, e);
    }
    rd_sqs_answer(r, o);
}

static void list_source_exists(rd_sqs_req_t *r)
{
    move_state_t *s = r->state;
    rd_sqs_started(r, rd_store_move_list(r->sqs->store, source_of(s), (int)s->max, on_listed, r));
}

void rd_sqs_list_message_move_tasks(rd_sqs_req_t *r)
{
    const cJSON *p = r->call.params;
    const char *src = rd_sqs_required(r, p, "SourceArn");
    if (src == NULL) return;
    long long max = 1;
    if (!rd_sqs_int(r, p, "MaxResults", 1, RD_STORE_MOVE_TASKS_MAX, &max)) return;
    move_state_t *s = new_state(r);
    s->max = max;
    if (!arn_queue(r, "SourceArn", src, s->source, &s->source_len)) return;
    check_exists(r, false, list_source_exists);
}

/* ------------------------------------------------------------ CancelMessageMoveTask */

static void on_cancelled(const rd_store_strings_t *res, void *arg)
{
    rd_sqs_req_t *r = arg;
    if (rd_sqs_store_failed(r, &res->head)) return;
    const rd_str_t *f = res->strings;
    if (res->count < 2 || f[0].ptr == NULL || f[1].ptr == NULL || f[0].len != 2 ||
        memcmp(f[0].ptr, "ok", 2) != 0) {
        rd_sqs_fail(r, &RD_SQS_ERR_RESOURCE_NOT_FOUND, "Task does not exist.");
        return;
    }
    char moved[24] = "0";
    if (f[1].len < sizeof moved) {
        memcpy(moved, f[1].ptr, f[1].len);
        moved[f[1].len] = '\0';
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "ApproximateNumberOfMessagesMoved", (double)atoll(moved));
    rd_sqs_answer(r, o);
}

static void cancel_source_exists(rd_sqs_req_t *r)
{
    move_state_t *s = r->state;
    rd_sqs_started(r, rd_store_move_cancel(r->sqs->store, source_of(s), s->task, on_cancelled, r));
}

void rd_sqs_cancel_message_move_task(rd_sqs_req_t *r)
{
    const char *handle = rd_sqs_required(r, r->call.params, "TaskHandle");
    if (handle == NULL) return;
    move_state_t *s = new_state(r);
    char name[256];
    if (!rd_sqs_handle_decode(handle, "", 0, &s->task, name, sizeof name)) {
        rd_sqs_fail(r, &RD_SQS_ERR_INVALID_PARAMETER_VALUE, "Value for parameter TaskHandle is invalid.");
        return;
    }
    if (!keep_queue(r, "SourceArn", name, strlen(name), s->source, &s->source_len)) return;
    check_exists(r, false, cancel_source_exists);
}
