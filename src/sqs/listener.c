/* listener.c - the SQS endpoint's HTTP face (docs/sqs.md "One engine, a
 * second face"): its own listener on the same loop, each request decoded
 * (codec.h), its signature checked (sigv4.h), its action found in the table
 * (actions.c) and run; the one answer encoded in the client's protocol. */
#include "retryd/sqs.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/sqs/codec.h"
#include "retryd/sqs/face.h"
#include "retryd/sqs/roles.h"
#include "retryd/tokens.h"

/* A form body is up to 3 bytes per byte of a 256 KiB batch, plus the names. */
enum { SQS_MAX_BODY_BYTES = 4 * RD_SQS_BODY_MAX };

static void count_error(rd_sqs_t *sqs, const rd_sqs_error_t *e)
{
    /* By the code's text: two rows may share one (TOO_MANY_TAGS and
     * INVALID_PARAMETER_VALUE), and a label must appear once. */
    for (size_t i = 0; i < sqs->error_kinds; i++)
        if (strcmp(sqs->errors[i].code, e->code) == 0) {
            sqs->errors[i].n++;
            return;
        }
    if (sqs->error_kinds < sizeof sqs->errors / sizeof sqs->errors[0]) {
        sqs->errors[sqs->error_kinds].code = e->code;
        sqs->errors[sqs->error_kinds++].n = 1;
    }
}

static void req_free(rd_sqs_req_t *r)
{
    if (r->free_state) r->free_state(r->state);
    rd_sqs_call_clear(&r->call);
    rd_free(r->queue);
    rd_free(r);
}

rd_store_queue_t rd_sqs_queue(const rd_sqs_req_t *r)
{
    rd_store_queue_t q = { .name = r->queue, .len = r->queue_len };
    return q;
}

void rd_sqs_answer(rd_sqs_req_t *r, cJSON *result)
{
    rd_buf_t out = RD_BUF_INIT;
    const char *ctype = NULL;
    rd_sqs_encode_result(&out, r->call.protocol, r->call.action, result, r->request_id, &ctype);
    char head[96];
    snprintf(head, sizeof head, "x-amzn-RequestId: %s\r\n", r->request_id);
    rd_http_respond(r->ex, 200, ctype, head, out.data ? out.data : "", out.len);
    rd_buf_free(&out);
    cJSON_Delete(result);
    req_free(r);
}

/* Answers e on ex in protocol p (no request state needed). */
static void respond_error(rd_sqs_t *sqs, rd_http_exchange_t *ex, rd_sqs_protocol_t p,
                          const char *request_id, const rd_sqs_error_t *e, const char *message)
{
    count_error(sqs, e);
    rd_buf_t out = RD_BUF_INIT, headers = RD_BUF_INIT;
    const char *ctype = NULL;
    rd_buf_printf(&headers, "x-amzn-RequestId: %s\r\n", request_id);
    rd_sqs_encode_error(&out, &headers, p, e, message, request_id, &ctype);
    rd_http_respond(ex, e->status, ctype, headers.data, out.data ? out.data : "", out.len);
    rd_buf_free(&out);
    rd_buf_free(&headers);
}

void rd_sqs_fail(rd_sqs_req_t *r, const rd_sqs_error_t *e, const char *fmt, ...)
{
    char message[512];
    message[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof message, fmt, ap);
        va_end(ap);
    }
    respond_error(r->sqs, r->ex, r->call.protocol, r->request_id, e, fmt ? message : NULL);
    req_free(r);
}

bool rd_sqs_store_failed(rd_sqs_req_t *r, const rd_store_head_t *head)
{
    switch (head->status) {
    case RD_STORE_OK:
        return false;
    case RD_STORE_UNAVAILABLE:
    case RD_STORE_LOST:
        /* A lost write may have been applied: SQS clients retry a 503, and
         * a send retried is at worst delivered twice (at least once). */
        rd_sqs_fail(r, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "Redis is not reachable; retry.");
        return true;
    case RD_STORE_ERROR:
        rd_error("sqs: Redis error on %s: %.*s", r->call.action, (int)head->detail.len,
                 head->detail.ptr ? head->detail.ptr : "");
        rd_sqs_fail(r, &RD_SQS_ERR_INTERNAL, "Redis answered with an error; see the log.");
        return true;
    default:
        rd_sqs_fail(r, &RD_SQS_ERR_INTERNAL, "Unexpected store status %d.", (int)head->status);
        return true;
    }
}

void rd_sqs_started(rd_sqs_req_t *r, int rc)
{
    if (rc != 0) rd_sqs_fail(r, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "Redis is not reachable; retry.");
}

/* A UUID-shaped request id, as SQS's are: 10 random bytes drawn once per
 * process and a counter, so ids are unique per process and across
 * instances without a RAND_bytes per request (which was 17% of a send's
 * daemon CPU, docs/benchmarks.md "SQS endpoint"). */
static void new_request_id(char out[40])
{
    static const char digits[] = "0123456789abcdef";
    static unsigned char b[16];
    static unsigned long long seq;
    if (seq == 0 && RAND_bytes(b, 10) != 1) memset(b, 0, 10);
    seq++;
    for (int i = 0; i < 6; i++) b[10 + i] = (unsigned char)(seq >> (8 * (5 - i)));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
        *p++ = digits[b[i] >> 4];
        *p++ = digits[b[i] & 15];
    }
    *p = '\0';
}

/* The queue a request names: its QueueUrl parameter, else its path when
 * that is a queue URL's ("/<account>/<name>"). */
static bool resolve_queue(rd_sqs_req_t *r, const rd_http_request_t *req)
{
    const char *url = rd_sqs_str(r->call.params, "QueueUrl");
    size_t len = 0;
    const char *name = NULL;
    if (url) {
        name = rd_sqs_name_of_url(r->sqs, url, &len);
    } else if (req->path_len > 1) {
        char path[RD_SQS_CURSOR_MAX];
        if (req->path_len < sizeof path) {
            memcpy(path, req->path, req->path_len);
            path[req->path_len] = '\0';
            name = rd_sqs_name_of_url(r->sqs, path, &len);
            if (name) name = req->path + (name - path);
        }
    } else {
        rd_sqs_fail(r, &RD_SQS_ERR_MISSING_PARAMETER,
                    "The request must contain the parameter QueueUrl.");
        return false;
    }
    if (name == NULL || !rd_sqs_queue_name_ok(name, len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_QUEUE_DOES_NOT_EXIST, "The specified queue does not exist.");
        return false;
    }
    r->queue = rd_strndup(name, len);
    r->queue_len = len;
    r->fifo = len > 5 && memcmp(name + len - 5, ".fifo", 5) == 0;
    if (r->key && !rd_sqs_key_allows(r->key, r->queue, r->queue_len)) {
        rd_sqs_fail(r, &RD_SQS_ERR_ACCESS_DENIED,
                    "The key %s is not allowed to use queue %.*s.", rd_sqs_key_id(r->key),
                    (int)len, name);
        return false;
    }
    return true;
}

static void on_request(rd_http_exchange_t *ex, const rd_http_request_t *req, void *ctx)
{
    rd_sqs_t *sqs = ctx;
    rd_sqs_req_t *r = rd_calloc(1, sizeof *r);
    r->sqs = sqs;
    r->ex = ex;
    new_request_id(r->request_id);
    rd_sqs_wire_t w = {
        .content_type = req->content_type, .target = rd_http_request_header(req, "x-amz-target"),
        .query = req->query, .query_len = req->query_len, .body = req->body,
        .body_len = req->body_len,
    };
    char why[256] = "";
    const rd_sqs_error_t *e = rd_sqs_decode(&w, &r->call, why, sizeof why);
    size_t index = 0;
    r->action = e ? NULL : rd_sqs_action_find(r->call.action, &index);
    /* Every request counts once: by its action, else as "other". */
    if (r->action) sqs->action_requests[index]++;
    else sqs->other_requests++;
    if (e) {
        rd_sqs_fail(r, e, "%s", why);
        return;
    }
    if (sqs->keys) {
        e = rd_sqs_sigv4_check(sqs->keys, req, (long long)time(NULL), &r->key, why, sizeof why);
        if (e) {
            rd_sqs_fail(r, e, "%s", why);
            return;
        }
    }
    if (r->action == NULL) {
        if (rd_sqs_action_known_unserved(r->call.action))
            rd_sqs_fail(r, &RD_SQS_ERR_UNSUPPORTED_OPERATION,
                        "retryd does not serve the action %s (docs/sqs.md).", r->call.action);
        else
            rd_sqs_fail(r, &RD_SQS_ERR_INVALID_ACTION,
                        "The action %s is not valid for this endpoint.", r->call.action);
        return;
    }
    unsigned need = rd_sqs_action_role(r->call.action);
    if (r->key && !rd_roles_grant(rd_sqs_key_roles(r->key), need)) {
        rd_sqs_fail(r, &RD_SQS_ERR_ACCESS_DENIED, "The key %s lacks the %s role, which %s needs.",
                    rd_sqs_key_id(r->key), rd_role_name(need), r->call.action);
        return;
    }
    if (r->action->needs_queue && !resolve_queue(r, req)) return;
    if (sqs->store == NULL || !rd_store_ready(sqs->store)) {
        rd_sqs_fail(r, &RD_SQS_ERR_SERVICE_UNAVAILABLE, "Redis is not reachable; retry.");
        return;
    }
    r->action->handler(r);
}

/* An error in the request's own protocol, from its head alone (nothing of
 * the body is read), for a listener's answer at the head. */
static void head_error(rd_sqs_t *sqs, const rd_http_request_t *head, const rd_sqs_error_t *e,
                       const char *message, rd_http_answer_t *out)
{
    const char *target = rd_http_request_header(head, "x-amz-target");
    rd_sqs_wire_t w = { .content_type = head->content_type, .target = target };
    rd_sqs_protocol_t p = rd_sqs_wire_protocol(&w);
    count_error(sqs, e);
    sqs->other_requests++;   /* not read: its action is not known for sure */
    char request_id[40];
    new_request_id(request_id);
    rd_buf_t body = RD_BUF_INIT, headers = RD_BUF_INIT;
    rd_buf_printf(&headers, "x-amzn-RequestId: %s\r\n", request_id);
    rd_sqs_encode_error(&body, &headers, p, e, message, request_id, &out->content_type);
    out->status = e->status;
    out->headers = rd_buf_take(&headers, NULL);
    out->body = rd_buf_take(&body, &out->body_len);
}

/* A body over SQS_MAX_BODY_BYTES is never read, but its client still gets
 * an answer it parses: the error in its protocol, from the head alone. */
static bool on_too_large(const rd_http_request_t *head, void *ctx, rd_http_answer_t *out)
{
    const char *target = rd_http_request_header(head, "x-amz-target");
    rd_sqs_wire_t w = { .content_type = head->content_type, .target = target };
    rd_sqs_protocol_t p = rd_sqs_wire_protocol(&w);
    const char *action = p == RD_SQS_JSON && target && strncmp(target, "AmazonSQS.", 10) == 0
                             ? target + 10 : "";
    size_t alen = strlen(action);
    const rd_sqs_error_t *e = &RD_SQS_ERR_REQUEST_TOO_LARGE;
    char message[160];
    snprintf(message, sizeof message, "The request body is over %d bytes, more than any SQS "
             "request needs.", SQS_MAX_BODY_BYTES);
    if (strcmp(action, "SendMessage") == 0) {
        e = &RD_SQS_ERR_INVALID_PARAMETER_VALUE;
        snprintf(message, sizeof message, "One or more parameters are invalid. Reason: Message "
                 "must be shorter than %d bytes.", RD_SQS_BODY_MAX);
    } else if (alen > 5 && strcmp(action + alen - 5, "Batch") == 0) {
        e = &RD_SQS_ERR_BATCH_TOO_LONG;
        snprintf(message, sizeof message, "Batch requests cannot be longer than %d bytes.",
                 RD_SQS_BODY_MAX);
    }
    head_error(ctx, head, e, message, out);
    return true;
}

/* With --sqs-credentials, a request whose head already fails the signature
 * check (no signature, an unknown access key, a malformed, stale or
 * misscoped one) is answered before its body is read, and before 100
 * Continue invites it: an unsigned client never makes the daemon hold its
 * body (docs/sqs.md "Authentication"). The signature itself covers the
 * body, so it is checked once the body is in. */
static bool on_head(const rd_http_request_t *head, void *ctx, rd_http_refusal_t *refusal)
{
    rd_sqs_t *sqs = ctx;
    if (sqs->keys == NULL) return true;
    char why[256] = "";
    const rd_sqs_error_t *e = rd_sqs_sigv4_check_head(sqs->keys, head, (long long)time(NULL), why,
                                                      sizeof why);
    if (e == NULL) return true;
    head_error(sqs, head, e, why, &refusal->answer);
    return false;
}

/* Loopback: 127.0.0.0/8, ::1 and localhost. */
static bool is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0) return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) return memcmp(&a6, &in6addr_loopback, sizeof a6) == 0;
    return false;
}

rd_sqs_t *rd_sqs_start(uv_loop_t *loop, const rd_sqs_options_t *opts, char *why, size_t why_len)
{
    rd_sqs_keys_t *keys = NULL;
    if (opts->credentials && opts->credentials[0]) {
        keys = rd_sqs_keys_load(opts->credentials, why, why_len);
        if (keys == NULL) return NULL;
    } else if (!is_loopback(opts->host)) {
        snprintf(why, why_len,
                 "--sqs-listen %s is not a loopback address: give --sqs-credentials, so that "
                 "every request must be signed (docs/sqs.md \"Authentication\")", opts->host);
        return NULL;
    }
    rd_sqs_t *sqs = rd_calloc(1, sizeof *sqs);
    sqs->loop = loop;
    sqs->store = opts->store;
    sqs->coalescer = opts->coalescer;
    sqs->enqueues = opts->enqueues;
    sqs->waiters = opts->waiters;
    sqs->moves = opts->moves;
    sqs->keys = keys;
    sqs->default_lease_ms = opts->default_lease_ms;
    snprintf(sqs->account, sizeof sqs->account, "%s", opts->account);
    snprintf(sqs->region, sizeof sqs->region, "%s", opts->region);
    sqs->action_requests = rd_calloc(rd_sqs_action_count, sizeof *sqs->action_requests);
    rd_http_options_t ho = {
        .host = opts->host, .port = opts->port, .max_body_bytes = SQS_MAX_BODY_BYTES,
        .max_connections = opts->max_connections, .idle_timeout_ms = opts->idle_timeout_ms,
        .max_pending_body_bytes = opts->max_pending_body_bytes,
        .max_pending_output_bytes = opts->max_pending_output_bytes,
        .handler = on_request, .on_head = on_head, .on_too_large = on_too_large,
        .handler_ctx = sqs,
        .keep_headers = true,
    };
    int rc = rd_http_server_start(loop, &ho, &sqs->http);
    if (rc != 0) {
        snprintf(why, why_len, "cannot listen on %s:%d: %s", opts->host, opts->port,
                 uv_strerror(rc));
        rd_sqs_keys_free(keys);
        rd_free(sqs->action_requests);
        rd_free(sqs);
        return NULL;
    }
    bool v6 = strchr(opts->host, ':') != NULL;
    snprintf(sqs->origin, sizeof sqs->origin, v6 ? "http://[%s]:%d" : "http://%s:%d", opts->host,
             rd_http_server_port(sqs->http));
    return sqs;
}

int rd_sqs_port(const rd_sqs_t *sqs)
{
    return rd_http_server_port(sqs->http);
}

void rd_sqs_forget_store(rd_sqs_t *sqs)
{
    sqs->store = NULL;
    sqs->coalescer = NULL;  /* freed with the store */
    sqs->enqueues = NULL;
}

static void on_http_drained(void *arg)
{
    rd_sqs_t *sqs = arg;
    void (*cb)(void *) = sqs->on_drained;
    void *cb_arg = sqs->drained_arg;
    rd_sqs_keys_free(sqs->keys);
    rd_free(sqs->action_requests);
    rd_free(sqs);
    if (cb) cb(cb_arg);
}

void rd_sqs_stop(rd_sqs_t *sqs, void (*on_drained)(void *arg), void *arg)
{
    sqs->on_drained = on_drained;
    sqs->drained_arg = arg;
    rd_http_server_stop(sqs->http, on_http_drained, sqs);
}

void rd_sqs_render_metrics(const rd_sqs_t *sqs, rd_buf_t *out)
{
    rd_buf_printf(out, "# HELP retryd_sqs_requests_total SQS endpoint requests, by action.\n"
                       "# TYPE retryd_sqs_requests_total counter\n");
    for (size_t i = 0; i < rd_sqs_action_count; i++)
        rd_buf_printf(out, "retryd_sqs_requests_total{action=\"%s\"} %llu\n",
                      rd_sqs_actions[i].name, sqs->action_requests[i]);
    /* Requests that did not decode, or named an action the table lacks. */
    rd_buf_printf(out, "retryd_sqs_requests_total{action=\"other\"} %llu\n", sqs->other_requests);
    rd_buf_printf(out, "# HELP retryd_sqs_errors_total SQS endpoint error answers, by code.\n"
                       "# TYPE retryd_sqs_errors_total counter\n");
    for (size_t i = 0; i < sqs->error_kinds; i++)
        rd_buf_printf(out, "retryd_sqs_errors_total{code=\"%s\"} %llu\n", sqs->errors[i].code,
                      sqs->errors[i].n);
}
