/* loadgen.c - the load generator of `make bench`.
 *
 * Drives retryd's HTTP API over keep-alive HTTP/1.1 connections (one request
 * in flight per connection, no pipelining), or Redis itself over RESP with a
 * fixed pipeline depth, and prints throughput and per-route latency
 * percentiles as key=value lines that scripts/bench.sh reads.
 *
 *   loadgen enqueue  --port P --queue Q --conns N --messages M [--payload-bytes B] [--batch K]
 *       N connections POST /queues/Q/messages until M messages are created;
 *       --batch K sends K messages a request, as one batch enqueue
 *       ({"messages":[{"payload":...},...]}, docs/reference.md: 1..1000 items,
 *       answered 200 {"results":[...]}), and every item must be created (201).
 *   loadgen work     --port P --queue Q --conns W --messages M [--count C]
 *       W workers claim (count 1: the single form; C > 1: {"count":C}) and
 *       succeed what they got (one POST .../succeed per message; batch
 *       acknowledgement POST /queues/Q/succeed when C > 1) until M succeeded.
 *   loadgen settle   --port P --queue Q --conns W --messages M [--count C]
 *       W workers loop settle-and-claim (docs/reference.md "Settle and claim"): each request settles what
 *       the worker holds as succeeded and claims the next C (count 1: one
 *       message per request), POST /queues/Q/claim {"count":C,"settle":[...]},
 *       until M succeeded.
 *   loadgen failonce --port P --queue Q --conns W --messages M [--retry-after-s R]
 *       Like work with count 1, but the first delivery of every message fails
 *       with retry_after_seconds R, the second succeeds. Also reports how late
 *       each retry was claimed after its retry_after (Redis clock, both ends).
 *   loadgen sqs-send --port P --queue Q --conns N --messages M [--payload-bytes B]
 *       The SQS endpoint's JSON protocol (docs/sqs.md; application/x-amz-json-1.0,
 *       X-Amz-Target AmazonSQS.SendMessage), raw HTTP: N connections send
 *       SendMessage to the queue URL http://HOST:P/ACCOUNT/Q until M are sent.
 *   loadgen sqs-receive --port P --queue Q --conns W --messages M [--count C]
 *       W workers loop ReceiveMessage (MaxNumberOfMessages C, 1..10) and
 *       DeleteMessageBatch of what they got (two requests per round, as an SQS
 *       consumer does) until M are deleted; an empty receive is repeated with
 *       WaitTimeSeconds 1. [--account A] (000000000000) names the queue URL;
 *       [--sigv4 ACCESS_KEY_ID:SECRET] signs every SQS request with Signature
 *       Version 4 (the Authorization header, region us-east-1, as botocore
 *       signs the JSON protocol: content-type;host;x-amz-date;x-amz-target).
 *   loadgen resp     --port P --conns C --pipeline D --requests M [--first-id F] -- ARG...
 *       C Redis connections each send D commands, wait for the D replies, and
 *       again, until M commands ran. "{id}" inside an ARG becomes F, F+1, ...
 *       (one number per command), which redis-benchmark cannot do.
 *
 * A claim answered 204 while work remains is repeated as a long-poll claim
 * (wait_seconds 1). Output, on stdout:
 *   mode=work conns=W count=C batch=K pipeline=D messages=M seconds=S msgs_per_s=R requests=N
 *        empty_claims=E cpu_us=U
 *   route=claim n=N p50_us=A p99_us=B max_us=C      (one line per route used)
 *   retry_latency n=N p50_ms=A p99_ms=B max_ms=C    (failonce)
 *   replies ok=N notok=N first_int_sum=N            (resp)
 * Any unexpected answer ends the run with a message on stderr and exit 1;
 * so does --timeout-s (default 300) without the work done.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/resource.h>

#include <cjson/cJSON.h>
#include <llhttp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <uv.h>

#define MAX_CLAIM 100            /* retryd's largest claim count */
#define MAX_TOKEN_BYTES 64       /* lease tokens are "<ms hex>.<serial hex>" */
#define READ_BUF_BYTES (64 * 1024)
#define SQS_BATCH_MAX 10         /* SQS's MaxNumberOfMessages and batch entries */
#define MAX_HANDLE_BYTES 256     /* receipt handles: base64url of "<id>:<lease token>" */
#define MAX_BATCH 1000           /* a batch enqueue's largest item count */

/* ---------------------------------------------------------------- options */

typedef enum lg_mode {
    MODE_ENQUEUE, MODE_WORK, MODE_SETTLE, MODE_FAILONCE, MODE_SQS_SEND, MODE_SQS_RECEIVE, MODE_RESP
} lg_mode_t;

typedef struct options {
    lg_mode_t mode;
    const char *host;
    int port;
    const char *queue;
    int conns;
    long long messages;          /* enqueue/work/failonce: messages; resp: commands */
    int payload_bytes;
    int count;                   /* claim count */
    int batch;                   /* enqueue: messages per request (1: the single form) */
    int retry_after_s;           /* failonce */
    int pipeline;                /* resp */
    const char *account;         /* sqs: the account in the queue URL */
    const char *sigv4;           /* sqs: "ACCESS_KEY_ID:SECRET", NULL: unsigned */
    long long first_id;          /* resp: value of the first {id} */
    int timeout_s;
    int argc;                    /* resp: the command template */
    char **argv;
} options_t;

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen enqueue|work|settle|failonce|sqs-send|sqs-receive --port P --queue Q\n"
            "               --conns N --messages M [--count C] [--payload-bytes B] [--batch K]\n"
            "               [--retry-after-s R] [--account A] [--sigv4 KEY_ID:SECRET]\n"
            "       loadgen resp --port P --conns C --pipeline D --requests M [--first-id F]"
            " -- ARG...\n"
            "       common: [--host 127.0.0.1] [--timeout-s 300]\n");
    exit(2);
}

static long long int_arg(const char *name, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || end == v || n < lo || n > hi) {
        fprintf(stderr, "loadgen: %s must be an integer in %lld..%lld\n", name, lo, hi);
        exit(2);
    }
    return n;
}

static void parse_options(int argc, char **argv, options_t *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->queue = "bench";
    o->conns = 1;
    o->messages = 1000;
    o->payload_bytes = 100;
    o->count = 1;
    o->batch = 1;
    o->pipeline = 1;
    o->first_id = 1;
    o->timeout_s = 300;
    o->account = "000000000000";
    if (argc < 2) usage();
    if (strcmp(argv[1], "enqueue") == 0) o->mode = MODE_ENQUEUE;
    else if (strcmp(argv[1], "work") == 0) o->mode = MODE_WORK;
    else if (strcmp(argv[1], "settle") == 0) o->mode = MODE_SETTLE;
    else if (strcmp(argv[1], "failonce") == 0) o->mode = MODE_FAILONCE;
    else if (strcmp(argv[1], "sqs-send") == 0) o->mode = MODE_SQS_SEND;
    else if (strcmp(argv[1], "sqs-receive") == 0) o->mode = MODE_SQS_RECEIVE;
    else if (strcmp(argv[1], "resp") == 0) o->mode = MODE_RESP;
    else usage();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            o->argc = argc - i - 1;
            o->argv = argv + i + 1;
            break;
        }
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (strcmp(a, "--host") == 0) o->host = v;
        else if (strcmp(a, "--port") == 0) o->port = (int)int_arg(a, v, 1, 65535);
        else if (strcmp(a, "--queue") == 0) o->queue = v;
        else if (strcmp(a, "--conns") == 0) o->conns = (int)int_arg(a, v, 1, 1000);
        else if (strcmp(a, "--messages") == 0 || strcmp(a, "--requests") == 0)
            o->messages = int_arg(a, v, 1, 100000000);
        else if (strcmp(a, "--payload-bytes") == 0)
            o->payload_bytes = (int)int_arg(a, v, 1, 100000);
        else if (strcmp(a, "--count") == 0) o->count = (int)int_arg(a, v, 1, MAX_CLAIM);
        else if (strcmp(a, "--batch") == 0) o->batch = (int)int_arg(a, v, 1, MAX_BATCH);
        else if (strcmp(a, "--retry-after-s") == 0)
            o->retry_after_s = (int)int_arg(a, v, 0, 3600);
        else if (strcmp(a, "--pipeline") == 0) o->pipeline = (int)int_arg(a, v, 1, 10000);
        else if (strcmp(a, "--first-id") == 0) o->first_id = int_arg(a, v, 0, INT64_MAX / 2);
        else if (strcmp(a, "--timeout-s") == 0) o->timeout_s = (int)int_arg(a, v, 1, 86400);
        else if (strcmp(a, "--account") == 0) o->account = v;
        else if (strcmp(a, "--sigv4") == 0 && strchr(v, ':')) o->sigv4 = v;
        else usage();
    }
    if (o->port == 0) usage();
    if (o->mode == MODE_RESP && o->argc == 0) usage();
    if (o->batch > 1 && o->mode != MODE_ENQUEUE) {
        fprintf(stderr, "loadgen: --batch is for enqueue\n");
        exit(2);
    }
    if (o->mode == MODE_FAILONCE && o->count != 1) {
        fprintf(stderr, "loadgen: failonce claims one message at a time\n");
        exit(2);
    }
    if (o->mode == MODE_SQS_RECEIVE && o->count > SQS_BATCH_MAX) {
        fprintf(stderr, "loadgen: sqs-receive takes at most %d messages a receive\n",
                SQS_BATCH_MAX);
        exit(2);
    }
}

/* ---------------------------------------------------------------- samples */

typedef struct samples {
    uint32_t *v;
    size_t n, cap;
} samples_t;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) {
        fprintf(stderr, "loadgen: out of memory\n");
        abort();
    }
    return q;
}

static void samples_add(samples_t *s, uint64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples. */
static uint32_t percentile(const samples_t *s, double p)
{
    if (s->n == 0) return 0;
    size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > s->n) rank = s->n;
    return s->v[rank - 1];
}

/* ---------------------------------------------------------------- state */

typedef enum route {
    R_ENQUEUE, R_ENQUEUE_BATCH, R_CLAIM, R_SUCCEED, R_SUCCEED_MANY, R_FAIL, R_SETTLE_CLAIM, R_SQS_SEND,
    R_SQS_RECEIVE, R_SQS_DELETE_BATCH, R_RESP, R_COUNT
} route_t;

static const char *const route_names[R_COUNT] = {
    "enqueue", "enqueue_batch", "claim", "succeed", "succeed_many", "fail", "settle_claim", "sqs_send",
    "sqs_receive", "sqs_delete_batch", "resp",
};

typedef struct claimed {
    long long id;
    char token[MAX_TOKEN_BYTES];
} claimed_t;

typedef struct bench bench_t;

typedef struct conn {
    bench_t *b;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    bool open;                    /* tcp initialised: must be closed */
    char rbuf[READ_BUF_BYTES];
    /* HTTP */
    llhttp_t parser;
    char *body;
    size_t body_len, body_cap;
    bool complete;                /* a whole response was parsed */
    int status;
    route_t route;                /* of the request in flight */
    bool long_poll;               /* it is a claim with wait_seconds */
    uint64_t sent_ns;
    claimed_t claimed[MAX_CLAIM];
    size_t nclaimed;
    size_t nsettling;             /* settle: messages the request in flight settles */
    size_t nbatch;                /* enqueue --batch: messages the request in flight carries */
    char handles[SQS_BATCH_MAX][MAX_HANDLE_BYTES];  /* sqs-receive: what the receive got */
    size_t nhandles;
    /* RESP */
    char *in;
    size_t in_len, in_cap;
    long long batch_left;         /* replies still expected for the batch */
} conn_t;

struct bench {
    options_t o;
    uv_loop_t *loop;
    uv_timer_t deadline;
    conn_t *conns;
    char *enqueue_body;
    size_t enqueue_body_len;
    char *batch_body;             /* enqueue --batch: {"messages":[...]} of o.batch items */
    size_t batch_body_len;
    char *sqs_send_body;          /* {"QueueUrl":...,"MessageBody":...} */
    size_t sqs_send_body_len;
    char queue_url[512];
    int connected;                /* connections up; the clock starts with the last */
    long long issued, done;       /* requests issued / messages (or commands) finished */
    long long requests, empty_claims;
    long long ok, notok, first_int_sum;
    uint64_t start_ns, end_ns;
    bool finished, failed;
    samples_t lat[R_COUNT];
    samples_t retry_ms;           /* failonce: claimed-at minus retry_after */
};

static void finish(bench_t *b);

/* Ends the run as failed, saying what went wrong and (up to 300 bytes of) why. */
static void fail_run(bench_t *b, const char *what, const char *detail, size_t detail_len)
{
    if (b->failed) return;
    fprintf(stderr, "loadgen: %s: %.*s\n", what, (int)(detail_len > 300 ? 300 : detail_len),
            detail ? detail : "");
    b->failed = true;
    finish(b);
}

/* ---------------------------------------------------------------- writing */

typedef struct wreq {
    uv_write_t req;
    size_t len;
    char data[];
} wreq_t;

static void on_written(uv_write_t *req, int status)
{
    conn_t *c = req->data;
    free(req);
    if (status < 0 && !c->b->finished)
        fail_run(c->b, "write failed", uv_strerror(status), strlen(uv_strerror(status)));
}

static void send_wreq(conn_t *c, wreq_t *w)
{
    w->req.data = c;
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)w->len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written);
    if (rc < 0) {
        free(w);
        fail_run(c->b, "write failed", uv_strerror(rc), strlen(uv_strerror(rc)));
    }
}

/* ---------------------------------------------------------------- SigV4 */

static void hex_of(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

static void hmac256(const void *key, size_t key_len, const char *msg, unsigned char out[32])
{
    unsigned int n = 32;
    if (HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, strlen(msg), out, &n) ==
        NULL)
        abort();
}

/* The Authorization and X-Amz-Date headers of one SQS request, signed as
 * docs/sqs.md "Authentication" checks them; the signing key is derived once
 * per day. */
static int sigv4_headers(const options_t *o, const char *target, const char *body,
                         size_t body_len, char *out, size_t out_len)
{
    static char day_done[9], key_id[129];
    static unsigned char k_signing[32];
    char amz_date[17], day[9], host[32], body_hash[65], canon_hash[65], signature[65];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    memcpy(day, amz_date, 8);
    day[8] = '\0';
    const char *colon = strchr(o->sigv4, ':');
    if (strcmp(day, day_done) != 0) {
        char k[300];
        unsigned char k1[32], k2[32], k3[32];
        snprintf(key_id, sizeof key_id, "%.*s", (int)(colon - o->sigv4), o->sigv4);
        snprintf(k, sizeof k, "AWS4%s", colon + 1);
        hmac256(k, strlen(k), day, k1);
        hmac256(k1, 32, "us-east-1", k2);
        hmac256(k2, 32, "sqs", k3);
        hmac256(k3, 32, "aws4_request", k_signing);
        memcpy(day_done, day, sizeof day);
    }
    unsigned char d[32];
    SHA256((const unsigned char *)body, body_len, d);
    hex_of(d, 32, body_hash);
    snprintf(host, sizeof host, "127.0.0.1:%d", o->port);
    char canon[1024], sts[512];
    snprintf(canon, sizeof canon,
             "POST\n/\n\ncontent-type:application/x-amz-json-1.0\nhost:%s\nx-amz-date:%s\n"
             "x-amz-target:AmazonSQS.%s\n\ncontent-type;host;x-amz-date;x-amz-target\n%s",
             host, amz_date, target, body_hash);
    SHA256((const unsigned char *)canon, strlen(canon), d);
    hex_of(d, 32, canon_hash);
    snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s/us-east-1/sqs/aws4_request\n%s", amz_date,
             day, canon_hash);
    hmac256(k_signing, 32, sts, d);
    hex_of(d, 32, signature);
    return snprintf(out, out_len,
                    "X-Amz-Date: %s\r\nAuthorization: AWS4-HMAC-SHA256 "
                    "Credential=%s/%s/us-east-1/sqs/aws4_request, "
                    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=%s\r\n",
                    amz_date, key_id, day, signature);
}

/* One POST; sqs_target (an SQS action) makes it the JSON protocol's request to "/". */
static void send_post(conn_t *c, route_t r, const char *path, const char *sqs_target,
                      const char *body, size_t body_len)
{
    char head[1024], auth[512] = "";
    if (sqs_target && c->b->o.sigv4 &&
        sigv4_headers(&c->b->o, sqs_target, body, body_len, auth, sizeof auth) >= (int)sizeof auth) {
        fail_run(c->b, "SigV4 headers too long", "", 0);
        return;
    }
    int n = sqs_target
                ? snprintf(head, sizeof head,
                           "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "Content-Type: application/x-amz-json-1.0\r\n"
                           "X-Amz-Target: AmazonSQS.%s\r\n%sContent-Length: %zu\r\n\r\n",
                           c->b->o.port, sqs_target, auth, body_len)
                : snprintf(head, sizeof head,
                           "POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n", path, body_len);
    if (n < 0 || (size_t)n >= sizeof head) {
        fail_run(c->b, "request head too long", "", 0);
        return;
    }
    wreq_t *w = xrealloc(NULL, sizeof *w + (size_t)n + body_len);
    memcpy(w->data, head, (size_t)n);
    memcpy(w->data + n, body, body_len);
    w->len = (size_t)n + body_len;
    c->route = r;
    c->sent_ns = uv_hrtime();
    c->b->requests++;
    send_wreq(c, w);
}

static void send_http(conn_t *c, route_t r, const char *path, const char *body, size_t body_len)
{
    send_post(c, r, path, NULL, body, body_len);
}

/* ---------------------------------------------------------------- HTTP routes */

static void send_enqueue(conn_t *c)
{
    bench_t *b = c->b;
    char path[320];
    snprintf(path, sizeof path, "/queues/%s/messages", b->o.queue);
    b->issued++;
    send_http(c, R_ENQUEUE, path, b->enqueue_body, b->enqueue_body_len);
}

/* {"messages":[<enqueue body> x n]} into a new buffer. */
static char *batch_body_of(const bench_t *b, size_t n, size_t *len)
{
    size_t cap = 16 + n * (b->enqueue_body_len + 1);
    char *body = xrealloc(NULL, cap);
    size_t at = (size_t)sprintf(body, "{\"messages\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) body[at++] = ',';
        memcpy(body + at, b->enqueue_body, b->enqueue_body_len);
        at += b->enqueue_body_len;
    }
    memcpy(body + at, "]}", 3);
    *len = at + 2;
    return body;
}

/* enqueue --batch: the next (up to) o.batch messages in one request. */
static void send_enqueue_batch(conn_t *c)
{
    bench_t *b = c->b;
    char path[320];
    snprintf(path, sizeof path, "/queues/%s/messages", b->o.queue);
    long long left = b->o.messages - b->issued;
    size_t n = left < b->o.batch ? (size_t)left : (size_t)b->o.batch;
    b->issued += (long long)n;
    c->nbatch = n;
    if (n == (size_t)b->o.batch) {
        send_http(c, R_ENQUEUE_BATCH, path, b->batch_body, b->batch_body_len);
        return;
    }
    size_t len;
    char *body = batch_body_of(b, n, &len);
    send_http(c, R_ENQUEUE_BATCH, path, body, len);
    free(body);
}

static void send_claim(conn_t *c, bool wait)
{
    bench_t *b = c->b;
    char path[320], body[64];
    snprintf(path, sizeof path, "/queues/%s/claim", b->o.queue);
    int n;
    if (b->o.count > 1 || b->o.mode == MODE_SETTLE)
        n = snprintf(body, sizeof body, wait ? "{\"count\":%d,\"wait_seconds\":1}"
                                             : "{\"count\":%d}", b->o.count);
    else
        n = snprintf(body, sizeof body, "%s", wait ? "{\"wait_seconds\":1}" : "{}");
    send_http(c, R_CLAIM, path, body, (size_t)n);
    c->long_poll = wait;
}

/* settle mode: succeed everything held and claim the next ones, one request. */
static void send_settle_claim(conn_t *c)
{
    bench_t *b = c->b;
    char path[320];
    snprintf(path, sizeof path, "/queues/%s/claim", b->o.queue);
    size_t cap = 64 + c->nclaimed * (80 + MAX_TOKEN_BYTES), len = 0;
    char *body = xrealloc(NULL, cap);
    len += (size_t)snprintf(body + len, cap - len, "{\"count\":%d,\"settle\":[", b->o.count);
    for (size_t i = 0; i < c->nclaimed; i++)
        len += (size_t)snprintf(body + len, cap - len,
                                "%s{\"id\":%lld,\"lease_token\":\"%s\",\"outcome\":\"succeeded\"}",
                                i ? "," : "", c->claimed[i].id, c->claimed[i].token);
    len += (size_t)snprintf(body + len, cap - len, "]}");
    c->nsettling = c->nclaimed;
    send_http(c, R_SETTLE_CLAIM, path, body, len);
    c->long_poll = false;
    free(body);
}

static void send_succeed(conn_t *c, const claimed_t *m)
{
    bench_t *b = c->b;
    char path[352], body[128];
    snprintf(path, sizeof path, "/queues/%s/messages/%lld/succeed", b->o.queue, m->id);
    int n = snprintf(body, sizeof body, "{\"lease_token\":\"%s\"}", m->token);
    send_http(c, R_SUCCEED, path, body, (size_t)n);
}

static void send_fail(conn_t *c, const claimed_t *m)
{
    bench_t *b = c->b;
    char path[352], body[192];
    snprintf(path, sizeof path, "/queues/%s/messages/%lld/fail", b->o.queue, m->id);
    int n = snprintf(body, sizeof body,
                     "{\"error\":\"bench failure\",\"lease_token\":\"%s\","
                     "\"retry_after_seconds\":%d}", m->token, b->o.retry_after_s);
    send_http(c, R_FAIL, path, body, (size_t)n);
}

static void send_ack(conn_t *c)
{
    bench_t *b = c->b;
    char path[320];
    snprintf(path, sizeof path, "/queues/%s/succeed", b->o.queue);
    size_t cap = 32 + c->nclaimed * (48 + MAX_TOKEN_BYTES), len = 0;
    char *body = xrealloc(NULL, cap);
    len += (size_t)snprintf(body + len, cap - len, "{\"messages\":[");
    for (size_t i = 0; i < c->nclaimed; i++)
        len += (size_t)snprintf(body + len, cap - len, "%s{\"id\":%lld,\"lease_token\":\"%s\"}",
                                i ? "," : "", c->claimed[i].id, c->claimed[i].token);
    len += (size_t)snprintf(body + len, cap - len, "]}");
    send_http(c, R_SUCCEED_MANY, path, body, len);
    free(body);
}

/* ---------------------------------------------------------------- SQS routes */

static void send_sqs_send(conn_t *c)
{
    bench_t *b = c->b;
    b->issued++;
    send_post(c, R_SQS_SEND, NULL, "SendMessage", b->sqs_send_body, b->sqs_send_body_len);
}

static void send_sqs_receive(conn_t *c, bool wait)
{
    bench_t *b = c->b;
    char body[640];
    int n = snprintf(body, sizeof body, "{\"QueueUrl\":\"%s\",\"MaxNumberOfMessages\":%d%s}",
                     b->queue_url, b->o.count, wait ? ",\"WaitTimeSeconds\":1" : "");
    send_post(c, R_SQS_RECEIVE, NULL, "ReceiveMessage", body, (size_t)n);
    c->long_poll = wait;
}

static void send_sqs_delete_batch(conn_t *c)
{
    bench_t *b = c->b;
    size_t cap = 640 + c->nhandles * (32 + MAX_HANDLE_BYTES), len = 0;
    char *body = xrealloc(NULL, cap);
    len += (size_t)snprintf(body, cap, "{\"QueueUrl\":\"%s\",\"Entries\":[", b->queue_url);
    for (size_t i = 0; i < c->nhandles; i++)
        len += (size_t)snprintf(body + len, cap - len, "%s{\"Id\":\"%zu\",\"ReceiptHandle\":\"%s\"}",
                                i ? "," : "", i, c->handles[i]);
    len += (size_t)snprintf(body + len, cap - len, "]}");
    send_post(c, R_SQS_DELETE_BATCH, NULL, "DeleteMessageBatch", body, len);
    c->long_poll = false;
    free(body);
}

/* Sends a connection's next request, if any work is left. */
static void next_request(conn_t *c);
static void message_done(bench_t *b, long long n);

/* A receive's messages: their receipt handles, then one DeleteMessageBatch;
 * none: the receive again, as a long poll. */
static void on_sqs_receive_answer(conn_t *c)
{
    bench_t *b = c->b;
    cJSON *doc = c->status == 200 ? cJSON_ParseWithLength(c->body, c->body_len) : NULL;
    if (doc == NULL) {
        fail_run(b, "ReceiveMessage answered", c->body, c->body_len);
        return;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, "Messages"), *m;
    bool ok = list == NULL || cJSON_IsArray(list);
    c->nhandles = 0;
    cJSON_ArrayForEach(m, list) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "ReceiptHandle");
        if (c->nhandles == SQS_BATCH_MAX || !cJSON_IsString(h) ||
            strlen(h->valuestring) >= MAX_HANDLE_BYTES) {
            ok = false;
            break;
        }
        strcpy(c->handles[c->nhandles++], h->valuestring);
    }
    cJSON_Delete(doc);
    if (!ok) {
        fail_run(b, "ReceiveMessage answer lacks ReceiptHandles", c->body, c->body_len);
        return;
    }
    if (c->nhandles > 0) {
        send_sqs_delete_batch(c);
        return;
    }
    b->empty_claims++;
    if (b->done < b->o.messages) send_sqs_receive(c, true);
}

/* Every entry must be in Successful, none in Failed. */
static void on_sqs_delete_answer(conn_t *c)
{
    bench_t *b = c->b;
    cJSON *doc = c->status == 200 ? cJSON_ParseWithLength(c->body, c->body_len) : NULL;
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(doc, "Successful");
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(doc, "Failed");
    bool good = cJSON_IsArray(ok) && cJSON_GetArraySize(ok) == (int)c->nhandles &&
                (failed == NULL || cJSON_GetArraySize(failed) == 0);
    cJSON_Delete(doc);
    if (!good) {
        fail_run(b, "DeleteMessageBatch answered", c->body, c->body_len);
        return;
    }
    message_done(b, (long long)c->nhandles);
    if (!b->finished) next_request(c);
}

/* "2026-11-30T08:47:13.297Z" -> epoch ms; -1 when it is not one. */
static long long parse_time_ms(const char *s)
{
    struct tm tm;
    int ms = 0;
    memset(&tm, 0, sizeof tm);
    if (s == NULL || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                            &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (long long)timegm(&tm) * 1000 + ms;
}

/* The id and lease_token of one claimed message; false when either is
 * missing or the token is longer than expected. */
static bool read_claimed(const cJSON *msg, claimed_t *out)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *token = cJSON_GetObjectItemCaseSensitive(msg, "lease_token");
    if (!cJSON_IsNumber(id) || !cJSON_IsString(token) ||
        strlen(token->valuestring) >= MAX_TOKEN_BYTES)
        return false;
    out->id = (long long)id->valuedouble;
    strcpy(out->token, token->valuestring);
    return true;
}

static void on_claim_answer(conn_t *c)
{
    bench_t *b = c->b;
    if (c->status == 204) {
        b->empty_claims++;
        if (b->done < b->o.messages) send_claim(c, true);
        return;
    }
    if (c->status != 200) {
        fail_run(b, "claim answered", c->body, c->body_len);
        return;
    }
    cJSON *doc = cJSON_ParseWithLength(c->body, c->body_len);
    if (doc == NULL) {
        fail_run(b, "claim answer is not JSON", c->body, c->body_len);
        return;
    }
    c->nclaimed = 0;
    bool ok = true;
    if (c->route == R_SETTLE_CLAIM) {
        /* Every settlement must say "succeeded"; then the claim may be empty. */
        const cJSON *settled = cJSON_GetObjectItemCaseSensitive(doc, "settled");
        const cJSON *s;
        size_t n = 0;
        cJSON_ArrayForEach(s, settled) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "status");
            if (!cJSON_IsString(st) || strcmp(st->valuestring, "succeeded") != 0) break;
            n++;
        }
        if (n != c->nsettling || cJSON_GetArraySize(settled) != (int)n) {
            cJSON_Delete(doc);
            fail_run(b, "settle-and-claim answered", c->body, c->body_len);
            return;
        }
    }
    if (b->o.count > 1 || b->o.mode == MODE_SETTLE) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, "messages");
        const cJSON *m;
        cJSON_ArrayForEach(m, list) {
            if (c->nclaimed == MAX_CLAIM || !read_claimed(m, &c->claimed[c->nclaimed])) {
                ok = false;
                break;
            }
            c->nclaimed++;
        }
        ok = ok && (c->nclaimed > 0 || c->route == R_SETTLE_CLAIM);
    } else {
        ok = read_claimed(doc, &c->claimed[0]);
        c->nclaimed = ok;
    }
    bool retry = false;
    if (ok && b->o.mode == MODE_FAILONCE) {
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(doc, "retry_count");
        retry = cJSON_IsNumber(rc) && rc->valuedouble >= 1;
        if (retry) {
            const cJSON *due = cJSON_GetObjectItemCaseSensitive(doc, "retry_after");
            const cJSON *at = cJSON_GetObjectItemCaseSensitive(doc, "updated_at");
            long long due_ms = cJSON_IsString(due) ? parse_time_ms(due->valuestring) : -1;
            long long at_ms = cJSON_IsString(at) ? parse_time_ms(at->valuestring) : -1;
            /* How long after it was due the retry was claimed, both on Redis's clock. */
            if (due_ms >= 0 && at_ms >= due_ms)
                samples_add(&b->retry_ms, (uint64_t)(at_ms - due_ms));
        }
    }
    cJSON_Delete(doc);
    if (!ok) {
        fail_run(b, "claim answer lacks id or lease_token", c->body, c->body_len);
        return;
    }
    if (c->route == R_SETTLE_CLAIM) {
        message_done(b, (long long)c->nsettling);
        if (b->finished) return;
        if (c->nclaimed == 0) b->empty_claims++;
        if (c->nclaimed > 0) send_settle_claim(c);
        else if (b->done < b->o.messages) send_claim(c, true);
        return;
    }
    if (b->o.mode == MODE_SETTLE) send_settle_claim(c);
    else if (b->o.count > 1) send_ack(c);
    else if (b->o.mode == MODE_FAILONCE && !retry) send_fail(c, &c->claimed[0]);
    else send_succeed(c, &c->claimed[0]);
}

static void message_done(bench_t *b, long long n)
{
    b->done += n;
    if (b->done >= b->o.messages && b->end_ns == 0) {
        b->end_ns = uv_hrtime();
        finish(b);
    }
}

static void on_http_answer(conn_t *c)
{
    bench_t *b = c->b;
    uint64_t us = (uv_hrtime() - c->sent_ns) / 1000;
    /* A long-poll claim waits by design, and a 204 (nothing due) is counted
     * apart: neither is a claim latency. */
    if (!((c->route == R_CLAIM || c->route == R_SQS_RECEIVE) && (c->status == 204 || c->long_poll)))
        samples_add(&b->lat[c->route], us);
    switch (c->route) {
    case R_SQS_SEND:
        if (c->status != 200 || memmem(c->body, c->body_len, "\"MessageId\"", 11) == NULL) {
            fail_run(b, "SendMessage answered", c->body, c->body_len);
            return;
        }
        message_done(b, 1);
        break;
    case R_SQS_RECEIVE:
        on_sqs_receive_answer(c);
        return;
    case R_SQS_DELETE_BATCH:
        on_sqs_delete_answer(c);
        return;
    case R_ENQUEUE:
        if (c->status != 201) {
            fail_run(b, "enqueue answered", c->body, c->body_len);
            return;
        }
        message_done(b, 1);
        break;
    case R_ENQUEUE_BATCH: {
        /* Every item must say 201 (created): count them rather than trust the length. */
        long long n = 0;
        const char *p = c->body, *end = c->body + c->body_len;
        while ((p = memmem(p, (size_t)(end - p), "\"status\":201", 12)) != NULL) {
            n++;
            p += 12;
        }
        if (c->status != 200 || n != (long long)c->nbatch) {
            fail_run(b, "batch enqueue answered", c->body, c->body_len);
            return;
        }
        message_done(b, n);
        break;
    }
    case R_CLAIM:
    case R_SETTLE_CLAIM:
        on_claim_answer(c);
        return;
    case R_SUCCEED:
    case R_FAIL:
        if (c->status != 200) {
            fail_run(b, "settle answered", c->body, c->body_len);
            return;
        }
        if (c->route == R_SUCCEED) message_done(b, 1);
        break;
    case R_SUCCEED_MANY: {
        /* Every item must say "succeeded": count them rather than trust the length. */
        long long n = 0;
        const char *p = c->body, *end = c->body + c->body_len;
        while ((p = memmem(p, (size_t)(end - p), "\"succeeded\"", 11)) != NULL) {
            n++;
            p += 11;
        }
        if (c->status != 200 || n != (long long)c->nclaimed) {
            fail_run(b, "batch acknowledgement answered", c->body, c->body_len);
            return;
        }
        message_done(b, n);
        break;
    }
    default:
        break;
    }
    if (!b->finished) next_request(c);
}

static void next_request(conn_t *c)
{
    bench_t *b = c->b;
    if (b->o.mode == MODE_ENQUEUE || b->o.mode == MODE_SQS_SEND) {
        if (b->issued < b->o.messages) {
            if (b->o.mode == MODE_SQS_SEND) send_sqs_send(c);
            else if (b->o.batch > 1) send_enqueue_batch(c);
            else send_enqueue(c);
        }
        return;
    }
    if (b->o.mode == MODE_SQS_RECEIVE) {
        if (b->done < b->o.messages) send_sqs_receive(c, false);
        return;
    }
    if (b->done < b->o.messages) send_claim(c, false);
}

/* ---------------------------------------------------------------- llhttp */

static int on_message_begin(llhttp_t *p)
{
    conn_t *c = p->data;
    c->body_len = 0;
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    conn_t *c = p->data;
    if (c->body_len + n + 1 > c->body_cap) {
        c->body_cap = (c->body_len + n + 1) * 2;
        c->body = xrealloc(c->body, c->body_cap);
    }
    memcpy(c->body + c->body_len, at, n);
    c->body_len += n;
    c->body[c->body_len] = '\0';
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    conn_t *c = p->data;
    c->status = p->status_code;
    c->complete = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t http_settings = {
    .on_message_begin = on_message_begin,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void http_feed(conn_t *c, const char *data, size_t len)
{
    while (len > 0 && !c->b->finished) {
        llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
        if (err == HPE_OK) return;
        if (err != HPE_PAUSED) {
            const char *reason = llhttp_get_error_reason(&c->parser);
            fail_run(c->b, "bad HTTP response", reason, strlen(reason));
            return;
        }
        size_t used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
        data += used;
        len -= used;
        llhttp_resume(&c->parser);
        if (c->complete) {
            c->complete = false;
            if (c->body == NULL) on_body(&c->parser, "", 0);
            on_http_answer(c);
        }
    }
}

/* ---------------------------------------------------------------- RESP */

/* Length of one complete RESP reply at p, 0 when more bytes are needed, -1
 * when it is not RESP. */
static long resp_reply_len(const char *p, size_t n)
{
    if (n < 3) return 0;
    const char *nl = memchr(p, '\n', n);
    if (nl == NULL) return 0;
    size_t line = (size_t)(nl - p) + 1;
    switch (p[0]) {
    case '+': case '-': case ':':
        return (long)line;
    case '$': {
        long long len = strtoll(p + 1, NULL, 10);
        if (len < 0) return (long)line;
        size_t total = line + (size_t)len + 2;
        return n >= total ? (long)total : 0;
    }
    case '*': {
        long long items = strtoll(p + 1, NULL, 10);
        size_t off = line;
        for (long long i = 0; i < items; i++) {
            long sub = resp_reply_len(p + off, n - off);
            if (sub <= 0) return sub;
            off += (size_t)sub;
        }
        return (long)off;
    }
    default:
        return -1;
    }
}

/* Tallies one reply: an error ends the run; an array whose first element is
 * a status string counts as ok or notok; a leading integer is summed (promote's
 * "moved"). */
static void resp_tally(bench_t *b, const char *p, size_t len)
{
    if (p[0] == '-') {
        fail_run(b, "Redis answered an error", p, len);
        return;
    }
    if (p[0] != '*') {
        b->ok++;
        return;
    }
    const char *first = memchr(p, '\n', len);
    if (first == NULL || (size_t)(first - p) + 1 >= len) {
        b->ok++;
        return;
    }
    first++;
    if (first[0] == ':') {
        b->first_int_sum += strtoll(first + 1, NULL, 10);
        b->ok++;
    } else if (first[0] == '$' && strncmp(first, "$2\r\nok\r\n", 8) == 0) {
        b->ok++;
    } else {
        b->notok++;
    }
}

static void resp_append_arg(char **buf, size_t *len, size_t *cap, const char *arg, long long id)
{
    char expanded[4096];
    const char *at = strstr(arg, "{id}");
    const char *s = arg;
    size_t n = strlen(arg);
    if (at) {
        int m = snprintf(expanded, sizeof expanded, "%.*s%lld%s", (int)(at - arg), arg, id,
                         at + 4);
        if (m > 0 && (size_t)m < sizeof expanded) {
            s = expanded;
            n = (size_t)m;
        }
    }
    if (*len + n + 32 > *cap) {
        *cap = (*len + n + 32) * 2;
        *buf = xrealloc(*buf, *cap);
    }
    *len += (size_t)sprintf(*buf + *len, "$%zu\r\n", n);
    memcpy(*buf + *len, s, n);
    *len += n;
    memcpy(*buf + *len, "\r\n", 2);
    *len += 2;
}

static void resp_send_batch(conn_t *c)
{
    bench_t *b = c->b;
    long long left = b->o.messages - b->issued;
    if (left <= 0) return;
    long long batch = left < b->o.pipeline ? left : b->o.pipeline;
    size_t cap = 256, len = 0;
    char *buf = xrealloc(NULL, cap);
    for (long long i = 0; i < batch; i++) {
        long long id = b->o.first_id + b->issued + i;
        if (len + 32 > cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        len += (size_t)sprintf(buf + len, "*%d\r\n", b->o.argc);
        for (int a = 0; a < b->o.argc; a++) resp_append_arg(&buf, &len, &cap, b->o.argv[a], id);
    }
    b->issued += batch;
    b->requests += batch;
    c->batch_left = batch;
    c->sent_ns = uv_hrtime();
    wreq_t *w = xrealloc(NULL, sizeof *w + len);
    memcpy(w->data, buf, len);
    w->len = len;
    free(buf);
    send_wreq(c, w);
}

static void resp_feed(conn_t *c, const char *data, size_t len)
{
    bench_t *b = c->b;
    if (c->in_len + len > c->in_cap) {
        c->in_cap = (c->in_len + len) * 2;
        c->in = xrealloc(c->in, c->in_cap);
    }
    memcpy(c->in + c->in_len, data, len);
    c->in_len += len;
    size_t off = 0;
    while (off < c->in_len && !b->finished) {
        long n = resp_reply_len(c->in + off, c->in_len - off);
        if (n < 0) {
            fail_run(b, "not a RESP reply", c->in + off, c->in_len - off);
            return;
        }
        if (n == 0) break;
        resp_tally(b, c->in + off, (size_t)n);
        off += (size_t)n;
        if (--c->batch_left == 0) {
            /* Every command of the batch waited as long as the batch did. */
            samples_add(&b->lat[R_RESP], (uv_hrtime() - c->sent_ns) / 1000);
        }
        message_done(b, 1);
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    if (!b->finished && c->batch_left == 0) resp_send_batch(c);
}

/* ---------------------------------------------------------------- connections */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    bench_t *b = c->b;
    if (b->finished) return;
    if (nread < 0) {
        fail_run(b, "connection lost", uv_strerror((int)nread),
                 strlen(uv_strerror((int)nread)));
        return;
    }
    if (b->o.mode == MODE_RESP) resp_feed(c, buf->base, (size_t)nread);
    else http_feed(c, buf->base, (size_t)nread);
}

static void on_connected(uv_connect_t *req, int status)
{
    conn_t *c = req->data;
    bench_t *b = c->b;
    if (status < 0) {
        fail_run(b, "cannot connect", uv_strerror(status), strlen(uv_strerror(status)));
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    /* Connecting is not part of the measurement: start when all are up. */
    if (++b->connected < b->o.conns) return;
    b->start_ns = uv_hrtime();
    for (int i = 0; i < b->o.conns && !b->finished; i++) {
        if (b->o.mode == MODE_RESP) resp_send_batch(&b->conns[i]);
        else next_request(&b->conns[i]);
    }
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

/* Ends the run: stops the deadline and closes every connection. */
static void finish(bench_t *b)
{
    if (b->finished) return;
    b->finished = true;
    if (b->end_ns == 0) b->end_ns = uv_hrtime();
    uv_close((uv_handle_t *)&b->deadline, on_closed);
    for (int i = 0; i < b->o.conns; i++) {
        conn_t *c = &b->conns[i];
        if (c->open && !uv_is_closing((uv_handle_t *)&c->tcp))
            uv_close((uv_handle_t *)&c->tcp, on_closed);
    }
}

static void on_deadline(uv_timer_t *t)
{
    bench_t *b = t->data;
    char detail[96];
    int n = snprintf(detail, sizeof detail, "%lld of %lld done after %d s", b->done,
                     b->o.messages, b->o.timeout_s);
    fail_run(b, "timed out", detail, (size_t)n);
}

/* ---------------------------------------------------------------- report */

static void report(bench_t *b)
{
    if (b->start_ns == 0) b->start_ns = b->end_ns;
    double secs = (double)(b->end_ns - b->start_ns) / 1e9;
    const char *mode = b->o.mode == MODE_ENQUEUE ? "enqueue"
                       : b->o.mode == MODE_WORK   ? "work"
                       : b->o.mode == MODE_SETTLE ? "settle"
                       : b->o.mode == MODE_FAILONCE ? "failonce"
                       : b->o.mode == MODE_SQS_SEND ? "sqs-send"
                       : b->o.mode == MODE_SQS_RECEIVE ? "sqs-receive" : "resp";
    long long n = b->o.mode == MODE_RESP ? b->issued : b->done;
    /* The load generator's own CPU, so that the bench can count it too. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long long cpu_us = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                       ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    printf("mode=%s conns=%d count=%d batch=%d pipeline=%d messages=%lld seconds=%.3f "
           "msgs_per_s=%.1f requests=%lld empty_claims=%lld cpu_us=%lld\n", mode, b->o.conns,
           b->o.count, b->o.batch, b->o.pipeline, n, secs, secs > 0 ? (double)n / secs : 0.0, b->requests,
           b->empty_claims, cpu_us);
    for (int r = 0; r < R_COUNT; r++) {
        samples_t *s = &b->lat[r];
        if (s->n == 0) continue;
        qsort(s->v, s->n, sizeof *s->v, cmp_u32);
        printf("route=%s n=%zu p50_us=%" PRIu32 " p99_us=%" PRIu32 " max_us=%" PRIu32 "\n",
               route_names[r], s->n, percentile(s, 50), percentile(s, 99), s->v[s->n - 1]);
    }
    if (b->o.mode == MODE_FAILONCE) {
        samples_t *s = &b->retry_ms;
        qsort(s->v, s->n, sizeof *s->v, cmp_u32);
        printf("retry_latency n=%zu p50_ms=%" PRIu32 " p99_ms=%" PRIu32 " max_ms=%" PRIu32 "\n",
               s->n, percentile(s, 50), percentile(s, 99), s->n ? s->v[s->n - 1] : 0);
    }
    if (b->o.mode == MODE_RESP)
        printf("replies ok=%lld notok=%lld first_int_sum=%lld\n", b->ok, b->notok,
               b->first_int_sum);
}

int main(int argc, char **argv)
{
    static bench_t bench;
    bench_t *b = &bench;
    parse_options(argc, argv, &b->o);
    b->loop = uv_default_loop();

    /* {"payload":"xxxx..."}: the payload is payload_bytes of text. */
    b->enqueue_body_len = (size_t)b->o.payload_bytes + 14;
    b->enqueue_body = xrealloc(NULL, b->enqueue_body_len + 1);
    memcpy(b->enqueue_body, "{\"payload\":\"", 12);
    for (int i = 0; i < b->o.payload_bytes; i++)
        b->enqueue_body[12 + i] = "abcdefghijklmnopqrstuvwxyz0123456789"[i % 36];
    memcpy(b->enqueue_body + 12 + b->o.payload_bytes, "\"}", 3);
    if (b->o.batch > 1) b->batch_body = batch_body_of(b, (size_t)b->o.batch, &b->batch_body_len);
    /* The same payload as SendMessage's MessageBody. */
    snprintf(b->queue_url, sizeof b->queue_url, "http://%s:%d/%s/%s", b->o.host, b->o.port,
             b->o.account, b->o.queue);
    b->sqs_send_body = xrealloc(NULL, sizeof b->queue_url + (size_t)b->o.payload_bytes + 64);
    b->sqs_send_body_len = (size_t)sprintf(b->sqs_send_body,
                                           "{\"QueueUrl\":\"%s\",\"MessageBody\":\"%.*s\"}",
                                           b->queue_url, b->o.payload_bytes, b->enqueue_body + 12);

    struct sockaddr_in addr;
    if (uv_ip4_addr(b->o.host, b->o.port, &addr) != 0) {
        fprintf(stderr, "loadgen: bad host %s\n", b->o.host);
        return 2;
    }
    uv_timer_init(b->loop, &b->deadline);
    b->deadline.data = b;
    uv_timer_start(&b->deadline, on_deadline, (uint64_t)b->o.timeout_s * 1000, 0);

    b->conns = calloc((size_t)b->o.conns, sizeof *b->conns);
    if (b->conns == NULL) abort();
    for (int i = 0; i < b->o.conns; i++) {
        conn_t *c = &b->conns[i];
        c->b = b;
        uv_tcp_init(b->loop, &c->tcp);
        c->open = true;
        c->tcp.data = c;
        llhttp_init(&c->parser, HTTP_RESPONSE, &http_settings);
        c->parser.data = c;
        c->connect_req.data = c;
        int rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr,
                                on_connected);
        if (rc < 0) {
            fail_run(b, "cannot connect", uv_strerror(rc), strlen(uv_strerror(rc)));
            break;
        }
    }
    uv_run(b->loop, UV_RUN_DEFAULT);
    if (!b->failed) report(b);

    for (int i = 0; i < b->o.conns; i++) {
        free(b->conns[i].body);
        free(b->conns[i].in);
    }
    free(b->conns);
    for (int r = 0; r < R_COUNT; r++) free(b->lat[r].v);
    free(b->retry_ms.v);
    free(b->enqueue_body);
    free(b->batch_body);
    free(b->sqs_send_body);
    uv_loop_close(b->loop);
    return b->failed ? 1 : 0;
}
