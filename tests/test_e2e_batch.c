/* test_e2e_batch.c - the batch enqueue end to end (docs/reference.md "Batch
 * enqueue"): the real build/retryd, real HTTP. A batch of 1000 answered in
 * order; invalid items mixed in, each answered as a single enqueue of it is;
 * bodies that are not a batch refused on the field; 8 clients sending
 * batches with overlapping idempotency keys and invalid items at once (one
 * message per key, every duplicate answered with the original, ids unique,
 * `enqueued` equal to the messages made); items at the payload limit; a
 * U+0000 or bytes that are not UTF-8 in one item refused for that item;
 * Redis refusing a call in the middle of a batch. */
#define E2E_SUITE "e2e_batch"
#include "e2e_common.h"

#include "retryd/buf.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* POST body (b's bytes) as a batch to q on the shared connection. */
static void post_batch(e2e_response_t *r, const char *q, const rd_buf_t *b)
{
    http_to(g_daemon.port, r, "POST", messages_path(q), b->data, b->len);
}

/* The results array of a 200 batch answer, which must have n entries. */
static const rd_json_t *expect_results(const e2e_response_t *r, size_t n)
{
    rd_json_t *doc = e2e_expect_json(r, 200);
    const rd_json_t *results = e2e_jget(doc, "results");
    assert_true(rd_json_is_array(results));
    if (rd_json_array_size(results) != n)
        fail_msg("%zu results for %zu items: %.300s", rd_json_array_size(results), n, r->body);
    return results;
}

/* Result i: its status, and (201/200) its message's id. */
static long long result_id(const rd_json_t *results, size_t i, int want_status)
{
    const rd_json_t *it = rd_json_array_at(results, i);
    long long status = e2e_jint(it, "status");
    if (status != want_status)
        fail_msg("item %zu: status %lld, want %d", i, status, want_status);
    if (status != 200 && status != 201) return -1;
    return e2e_jint(e2e_jget(it, "message"), "id");
}

static const char *stats_path(const char *q)
{
    return e2e_fmt("/queues/%s/stats", q);
}

static long long enqueued_total(const char *q)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", stats_path(q), NULL);
    long long n = e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "totals"), "enqueued");
    e2e_response_free(&r);
    return n;
}

/* The value of the sample `name` in GET /metrics (-1 when absent). */
static long long metric(const char *name)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *p = strstr(r.body, needle);
    long long v = p ? strtoll(p + strlen(needle), NULL, 10) : -1;
    e2e_response_free(&r);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* 1000 items in one request: 1000 results in request order, each 201 with
 * its message; ids in the items' order; ten enqueue_many calls counted in
 * /metrics; the messages are there, claimable in that order. */
static void test_batch_of_1000_in_order(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "thousand");
    long long calls0 = metric("retryd_enqueue_batch_calls_total");
    long long items0 = metric("retryd_enqueue_batch_items_total");
    long long reqs0 = metric("retryd_enqueue_batch_requests_total");
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "{\"messages\":[");
    for (int i = 0; i < 1000; i++)
        rd_buf_printf(&b, "%s{\"payload\":\"m-%d\"%s}", i ? "," : "", i,
                      i % 100 == 7 ? ",\"max_retries\":5" : "");
    rd_buf_printf(&b, "]}");
    e2e_response_t r = { 0 };
    post_batch(&r, q, &b);
    const rd_json_t *results = expect_results(&r, 1000);
    for (size_t i = 0; i < 1000; i++) {
        long long id = result_id(results, i, 201);
        const rd_json_t *m = e2e_jget(rd_json_array_at(results, i), "message");
        assert_int_equal(id, (long long)i + 1);
        assert_string_equal(e2e_jstr(m, "payload"), e2e_fmt("m-%zu", i));
        assert_int_equal(e2e_jint(m, "max_retries"), i % 100 == 7 ? 5 : 3);
        assert_string_equal(e2e_jstr(m, "status"), "pending");
    }
    e2e_response_free(&r);
    rd_buf_free(&b);
    assert_int_equal(enqueued_total(q), 1000);
    assert_int_equal(metric("retryd_enqueue_batch_requests_total") - reqs0, 1);
    assert_int_equal(metric("retryd_enqueue_batch_items_total") - items0, 1000);
    assert_int_equal(metric("retryd_enqueue_batch_calls_total") - calls0, 10);
    char token[128];
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    assert_int_equal(claim_one(q, 30, token, sizeof token), 2);
}

/* Invalid items among valid ones: each answered with the errors a single
 * enqueue of the same object gets (the same fields, codes and messages),
 * a non-object 400 as a single enqueue's non-object body; the valid ones
 * are enqueued, a key repeated within the batch answers 200 with the
 * first's message. */
static void test_invalid_items_answered_as_single_enqueues(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "mixed");
    static const char *const items[] = {
        "{\"payload\":\"first\"}",
        "{\"max_retries\":3}",
        "{\"payload\":\"x\",\"max_retries\":11}",
        "5",
        "{\"payload\":7,\"priority\":10,\"delay_seconds\":-1}",
        "{\"payload\":\"g\",\"group\":\"\"}",
        "{\"payload\":\"keyed\",\"idempotency_key\":\"k1\"}",
        "{\"payload\":\"keyed again\",\"idempotency_key\":\"k1\"}",
        "{\"payload\":\"x\",\"idempotency_key\":\"\",\"ttl_seconds\":0}",
        "[1,2]",
        "{\"payload\":\"last\",\"priority\":4,\"group\":\"g1\",\"delay_seconds\":30}",
    };
    enum { N = sizeof items / sizeof items[0] };
    static const int want[N] = { 201, 422, 422, 400, 422, 422, 201, 200, 422, 400, 201 };
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "{\"messages\":[");
    for (size_t i = 0; i < N; i++) rd_buf_printf(&b, "%s%s", i ? "," : "", items[i]);
    rd_buf_printf(&b, "]}");
    e2e_response_t r = { 0 }, one = { 0 };
    post_batch(&r, q, &b);
    const rd_json_t *results = expect_results(&r, N);
    long long keyed = -1;
    for (size_t i = 0; i < N; i++) {
        const rd_json_t *it = rd_json_array_at(results, i);
        long long id = result_id(results, i, want[i]);
        if (i == 6) keyed = id;
        if (i == 7) {
            assert_int_equal(id, keyed);
            assert_string_equal(e2e_jstr(e2e_jget(it, "message"), "payload"), "keyed");
        }
        if (want[i] == 201 || want[i] == 200) continue;
        /* The same object alone, in another queue. */
        char other[64];
        e2e_queue_name(other, sizeof other, "single");
        http(&one, "POST", messages_path(other), items[i]);
        assert_int_equal(one.status, want[i]);
        assert_string_equal(e2e_jstr(it, "type"), e2e_jstr(one.json, "type"));
        assert_string_equal(e2e_jstr(it, "title"), e2e_jstr(one.json, "title"));
        const rd_json_t *ea = e2e_jget(it, want[i] == 422 ? "errors" : "type");
        if (want[i] == 422) {
            const rd_json_t *eb = e2e_jget(one.json, "errors");
            assert_int_equal(rd_json_array_size(ea), rd_json_array_size(eb));
            for (size_t k = 0; k < rd_json_array_size(ea); k++) {
                const rd_json_t *x = rd_json_array_at(ea, k), *y = rd_json_array_at(eb, k);
                assert_string_equal(e2e_jstr(x, "field"), e2e_jstr(y, "field"));
                assert_string_equal(e2e_jstr(x, "code"), e2e_jstr(y, "code"));
                assert_string_equal(e2e_jstr(x, "message"), e2e_jstr(y, "message"));
            }
        }
        e2e_response_free(&one);
    }
    const rd_json_t *last = e2e_jget(rd_json_array_at(results, N - 1), "message");
    assert_int_equal(e2e_jint(last, "priority"), 4);
    assert_string_equal(e2e_jstr(last, "group"), "g1");
    assert_true(e2e_jtime(last, "retry_after") > e2e_jtime(last, "created_at"));
    e2e_response_free(&r);
    rd_buf_free(&b);
    assert_int_equal(enqueued_total(q), 3);
}

/* Bodies that are not a batch: 422 problem+json naming the field, nothing
 * enqueued. */
static void test_not_a_batch_refused_on_the_field(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "notbatch");
    static const char *const bodies[][2] = {
        { "{\"messages\":{}}", "messages" },
        { "{\"messages\":\"x\"}", "messages" },
        { "{\"messages\":null}", "messages" },
        { "{\"messages\":[]}", "messages" },
        { "{\"messages\":[{\"payload\":\"a\"}],\"payload\":\"b\"}", "payload" },
        { "{\"messages\":[{\"payload\":\"a\"}],\"delay_seconds\":5}", "delay_seconds" },
        { "{\"messages\":[{\"payload\":\"a\"}],\"idempotency_key\":\"k\"}", "idempotency_key" },
    };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        http(&r, "POST", messages_path(q), bodies[i][0]);
        rd_json_t *errors = expect_invalid(&r, messages_path(q), 1);
        expect_field_error(errors, bodies[i][1], "invalid", NULL);
    }
    /* 1001 items. */
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "{\"messages\":[");
    for (int i = 0; i < 1001; i++) rd_buf_printf(&b, "%s{\"payload\":\"p\"}", i ? "," : "");
    rd_buf_printf(&b, "]}");
    post_batch(&r, q, &b);
    expect_field_error(expect_invalid(&r, messages_path(q), 1), "messages", "invalid",
                       "messages must be an array of 1 to 1000 messages.");
    rd_buf_free(&b);
    e2e_response_free(&r);
    assert_int_equal(enqueued_total(q), 0);
}

/* Items at the queue's max_payload_bytes: at the limit 201, one byte past
 * it 413 with the payload's error (as a single enqueue), the rest go on. */
static void test_items_at_the_payload_limit(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "limit");
    e2e_response_t r = { 0 };
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"max_payload_bytes\":4096}");
    assert_int_equal(r.status, 200);
    char *at = malloc(4097), *over = malloc(4098);
    memset(at, 'a', 4096);
    at[4096] = '\0';
    memset(over, 'o', 4097);
    over[4097] = '\0';
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "{\"messages\":[");
    for (int i = 0; i < 60; i++)
        rd_buf_printf(&b, "%s{\"payload\":\"%s\"}", i ? "," : "", i % 3 == 2 ? over : at);
    rd_buf_printf(&b, "]}");
    post_batch(&r, q, &b);
    const rd_json_t *results = expect_results(&r, 60);
    long long next = 1;
    for (size_t i = 0; i < 60; i++) {
        const rd_json_t *it = rd_json_array_at(results, i);
        if (i % 3 == 2) {
            result_id(results, i, 413);
            assert_string_equal(e2e_jstr(it, "type"), "/problems/payload-too-large");
            const rd_json_t *e = rd_json_array_at(e2e_jget(it, "errors"), 0);
            assert_string_equal(e2e_jstr(e, "field"), "payload");
            assert_non_null(strstr(e2e_jstr(e, "message"), "at most 4096 bytes"));
        } else {
            assert_int_equal(result_id(results, i, 201), next++);
            assert_int_equal(strlen(e2e_jstr(e2e_jget(it, "message"), "payload")), 4096);
        }
    }
    e2e_response_free(&r);
    rd_buf_free(&b);
    free(at);
    free(over);
    assert_int_equal(enqueued_total(q), 40);
}

/* A U+0000 or bytes that are not UTF-8 in one item: that item's 422 on the
 * field, as a single enqueue; a raw NUL byte makes the body not JSON (400,
 * nothing enqueued). */
static void test_nul_and_bad_utf8_refused_per_item(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "text");
    static const char body[] =
        "{\"messages\":[{\"payload\":\"ok\"},{\"payload\":\"a\\u0000b\"},"
        "{\"payload\":\"\xff\xfe\"},{\"payload\":\"k\",\"idempotency_key\":\"x\\u0000\"},"
        "{\"payload\":\"g\",\"group\":\"\xc3\"},{\"payload\":\"ok too\"}]}";
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), body);
    const rd_json_t *results = expect_results(&r, 6);
    static const char *const fields[] = { NULL, "payload", "payload", "idempotency_key", "group" };
    static const char *const messages[] = { NULL, "payload must not contain U+0000.",
                                            "payload must be valid UTF-8.", NULL,
                                            "group must be valid UTF-8." };
    assert_int_equal(result_id(results, 0, 201), 1);
    for (size_t i = 1; i <= 4; i++) {
        result_id(results, i, 422);
        const rd_json_t *e = rd_json_array_at(e2e_jget(rd_json_array_at(results, i), "errors"), 0);
        assert_string_equal(e2e_jstr(e, "field"), fields[i]);
        if (messages[i]) assert_string_equal(e2e_jstr(e, "message"), messages[i]);
    }
    assert_int_equal(result_id(results, 5, 201), 2);
    /* A raw NUL inside a string is not JSON at all. */
    static const char raw[] = "{\"messages\":[{\"payload\":\"a\0b\"}]}";
    http_to(g_daemon.port, &r, "POST", messages_path(q), raw, sizeof raw - 1);
    e2e_expect_problem(&r, 400, "malformed-request", NULL);
    e2e_response_free(&r);
    assert_int_equal(enqueued_total(q), 2);
}

/* ---- 8 clients at once ---- */

enum { CLIENTS = 8, BATCHES = 4, ITEMS = 150, KEYS = 300 };

typedef struct answer {
    int key;                    /* -1: no key; -2: an invalid item */
    int status;
    long long id;
} answer_t;

typedef struct client {
    pthread_t thread;
    int index;
    const char *queue;
    answer_t answers[BATCHES * ITEMS];
    char error[256];
} client_t;

/* Item i of batch n of client c: a key from the shared pool (overlapping
 * the other clients' and, now and then, an earlier item of the same batch),
 * none, or an invalid item. */
static int item_key(int c, int n, int i)
{
    if (i % 13 == 5) return -2;
    if (i % 7 == 3) return -1;
    if (i % 11 == 4) return (c * 37 + n * 101 + i - 1) % KEYS;   /* maybe the item before's */
    return (c * 37 + n * 101 + i) % KEYS;
}

static void *client_main(void *arg)
{
    client_t *cl = arg;
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    for (int n = 0; n < BATCHES && !cl->error[0]; n++) {
        rd_buf_t b = RD_BUF_INIT;
        rd_buf_printf(&b, "{\"messages\":[");
        for (int i = 0; i < ITEMS; i++) {
            int k = item_key(cl->index, n, i);
            cl->answers[n * ITEMS + i].key = k;
            if (k == -2) rd_buf_printf(&b, "%s{\"payload\":\"bad\",\"max_retries\":99}", i ? "," : "");
            else if (k == -1) rd_buf_printf(&b, "%s{\"payload\":\"c%d-%d-%d\"}", i ? "," : "", cl->index, n, i);
            else rd_buf_printf(&b, "%s{\"payload\":\"key %d\",\"idempotency_key\":\"k-%d\"}",
                               i ? "," : "", k, k);
        }
        rd_buf_printf(&b, "]}");
        char path[256];
        snprintf(path, sizeof path, "/queues/%s/messages", cl->queue);
        if (e2e_try_request(&conn, g_daemon.port, &r, "POST", path, b.data, b.len) != 0 ||
            r.status != 200 || r.json == NULL) {
            snprintf(cl->error, sizeof cl->error, "batch %d: status %d %.150s", n, r.status,
                     r.body ? r.body : "(no answer)");
        } else {
            const rd_json_t *results = rd_json_get(r.json, "results");
            if (rd_json_array_size(results) != ITEMS)
                snprintf(cl->error, sizeof cl->error, "batch %d: %zu results", n,
                         rd_json_array_size(results));
            size_t i = 0;
            for (const rd_json_t *it = rd_json_array_first(results); it && i < ITEMS;
                 it = rd_json_next(it), i++) {
                answer_t *a = &cl->answers[n * ITEMS + i];
                long long st = -1, id = -1;
                rd_json_integer(rd_json_get(it, "status"), &st);
                rd_json_integer(rd_json_get(rd_json_get(it, "message"), "id"), &id);
                a->status = (int)st;
                a->id = id;
            }
        }
        e2e_response_free(&r);
        rd_buf_free(&b);
    }
    e2e_conn_close(&conn);
    return NULL;
}

/* 8 clients send 4 batches of 150 each at once, with idempotency keys that
 * overlap across clients and within batches, and invalid items: every key
 * ends with exactly one message (the one its idempotency record names), its
 * first enqueue answered 201 and every other 200 with that message; ids are
 * unique; invalid items 422; `enqueued` equals the messages made. */
static void test_concurrent_batches_with_overlapping_keys(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "concurrent");
    static client_t clients[CLIENTS];
    memset(clients, 0, sizeof clients);
    for (int c = 0; c < CLIENTS; c++) {
        clients[c].index = c;
        clients[c].queue = q;
        assert_int_equal(pthread_create(&clients[c].thread, NULL, client_main, &clients[c]), 0);
    }
    for (int c = 0; c < CLIENTS; c++) pthread_join(clients[c].thread, NULL);
    for (int c = 0; c < CLIENTS; c++)
        if (clients[c].error[0]) fail_msg("client %d: %s", c, clients[c].error);

    static long long key_id[KEYS];
    static int created_for_key[KEYS];
    for (int k = 0; k < KEYS; k++) key_id[k] = -1, created_for_key[k] = 0;
    static char seen[CLIENTS * BATCHES * ITEMS + 1];
    memset(seen, 0, sizeof seen);
    long long created = 0;
    for (int c = 0; c < CLIENTS; c++) {
        for (int i = 0; i < BATCHES * ITEMS; i++) {
            const answer_t *a = &clients[c].answers[i];
            if (a->key == -2) {
                if (a->status != 422) fail_msg("client %d item %d: invalid, answered %d", c, i, a->status);
                continue;
            }
            if (a->status == 201) {
                created++;
                if (a->id < 1 || a->id > CLIENTS * BATCHES * ITEMS || seen[a->id])
                    fail_msg("id %lld made twice or out of range", a->id);
                seen[a->id] = 1;
                if (a->key >= 0) created_for_key[a->key]++;
            } else if (a->status != 200 || a->key < 0) {
                fail_msg("client %d item %d (key %d): status %d", c, i, a->key, a->status);
            }
            if (a->key < 0) continue;
            if (key_id[a->key] < 0) key_id[a->key] = a->id;
            if (key_id[a->key] != a->id)
                fail_msg("key %d answered ids %lld and %lld", a->key, key_id[a->key], a->id);
        }
    }
    for (int k = 0; k < KEYS; k++) {
        if (key_id[k] < 0) continue;
        if (created_for_key[k] != 1) fail_msg("key %d: %d messages made", k, created_for_key[k]);
        redisReply *x = e2e_rcmd(g_redis, "GET %s:{%s}:idem:k-%d", g_prefix, q, k);
        assert_int_equal(x->type, REDIS_REPLY_STRING);
        assert_int_equal(atoll(x->str), key_id[k]);
        freeReplyObject(x);
        e2e_response_t r = { 0 };
        http(&r, "GET", message_path(q, key_id[k], NULL), NULL);
        assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), e2e_fmt("key %d", k));
        e2e_response_free(&r);
    }
    assert_int_equal(enqueued_total(q), created);
    redisReply *x = e2e_rcmd(g_redis, "GET %s:{%s}:seq", g_prefix, q);
    assert_int_equal(atoll(x->str), created);
    freeReplyObject(x);
}

/* ---- single enqueues sent together (docs/coalescing.md "Enqueues") ---- */

enum { SINGLE_CLIENTS = 40, SINGLE_EACH = 15, SINGLE_KEYS = 60 };

typedef struct single_client {
    pthread_t thread;
    int index;
    const char *queue;
    answer_t answers[SINGLE_EACH];
    char error[256];
} single_client_t;

/* Request i of client c: a key from the shared pool, none, an invalid body
 * (422, never sent), or a payload of 1100 bytes, over the queue's
 * max_payload_bytes of 1024 (413,
 * the item's own refusal in the shared call). */
static int single_key(int c, int i)
{
    if ((c + i) % 9 == 4) return -2;
    if ((c + i) % 11 == 6) return -3;
    if ((c + i) % 5 == 1) return -1;
    return (c * 7 + i) % SINGLE_KEYS;
}

static void *single_main(void *arg)
{
    single_client_t *cl = arg;
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    for (int i = 0; i < SINGLE_EACH && !cl->error[0]; i++) {
        int k = single_key(cl->index, i);
        answer_t *a = &cl->answers[i];
        a->key = k;
        /* Buffers of its own: e2e_fmt's ring is not for threads. */
        char body[1200];
        if (k == -2) snprintf(body, sizeof body, "{\"payload\":\"bad\",\"max_retries\":99}");
        else if (k == -3) snprintf(body, sizeof body, "{\"payload\":\"%01100d\"}", 0);
        else if (k == -1) snprintf(body, sizeof body, "{\"payload\":\"s%d-%d\"}", cl->index, i);
        else snprintf(body, sizeof body, "{\"payload\":\"key %d\",\"idempotency_key\":\"s-%d\"}", k, k);
        char path[256];
        snprintf(path, sizeof path, "/queues/%s/messages", cl->queue);
        if (e2e_try_request(&conn, g_daemon.port, &r, "POST", path, body, strlen(body)) != 0) {
            snprintf(cl->error, sizeof cl->error, "request %d: no answer", i);
            break;
        }
        a->status = r.status;
        a->id = -1;
        if (r.json) {
            long long id = -1;
            rd_json_integer(rd_json_get(r.json, "id"), &id);
            a->id = id;
        }
        char own[128];
        snprintf(own, sizeof own, "/queues/%s/messages/%lld", cl->queue, a->id);
        size_t ll = strlen(r.location), ol = strlen(own);
        if (r.status == 201 && (ll < ol || strcmp(r.location + ll - ol, own) != 0))
            snprintf(cl->error, sizeof cl->error, "request %d: Location %.100s, not its own %.100s",
                     i, r.location, own);
        e2e_response_free(&r);
    }
    e2e_conn_close(&conn);
    return NULL;
}

/* 40 clients at once send 15 single enqueues each to one queue while its
 * first enqueue waits on a paused Redis (CLIENT PAUSE WRITE): they meet in
 * the queue's line and go out together in enqueue_many calls (counted in
 * /metrics: fewer calls than requests). Each request keeps its own answer:
 * one message per idempotency key (201 once, 200 with it after), ids
 * unique, invalid bodies 422, payloads over the policy's limit 413, its own
 * Location; `enqueued` equals the messages made. */
static void test_single_enqueues_sent_together(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "singles");
    e2e_response_t r = { 0 };
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"max_payload_bytes\":1024}");
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    long long requests0 = metric("retryd_enqueue_requests_total");
    long long waited0 = metric("retryd_enqueue_waited_total");
    long long calls0 = metric("retryd_enqueue_calls_total");
    assert_true(requests0 >= 0 && waited0 >= 0 && calls0 >= 0);

    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 400 WRITE"));
    static single_client_t clients[SINGLE_CLIENTS];
    memset(clients, 0, sizeof clients);
    for (int c = 0; c < SINGLE_CLIENTS; c++) {
        clients[c].index = c;
        clients[c].queue = q;
        assert_int_equal(pthread_create(&clients[c].thread, NULL, single_main, &clients[c]), 0);
    }
    for (int c = 0; c < SINGLE_CLIENTS; c++) pthread_join(clients[c].thread, NULL);
    for (int c = 0; c < SINGLE_CLIENTS; c++)
        if (clients[c].error[0]) fail_msg("client %d: %s", c, clients[c].error);

    static long long key_id[SINGLE_KEYS];
    static int created_for_key[SINGLE_KEYS];
    for (int k = 0; k < SINGLE_KEYS; k++) key_id[k] = -1, created_for_key[k] = 0;
    static char seen[SINGLE_CLIENTS * SINGLE_EACH + 1];
    memset(seen, 0, sizeof seen);
    long long created = 0, sent = 0;
    for (int c = 0; c < SINGLE_CLIENTS; c++) {
        for (int i = 0; i < SINGLE_EACH; i++) {
            const answer_t *a = &clients[c].answers[i];
            if (a->key == -2) {
                if (a->status != 422) fail_msg("client %d request %d: invalid, answered %d", c, i, a->status);
                continue;
            }
            sent++;
            if (a->key == -3) {
                if (a->status != 413) fail_msg("client %d request %d: too large, answered %d", c, i, a->status);
                continue;
            }
            if (a->status == 201) {
                created++;
                if (a->id < 1 || a->id > SINGLE_CLIENTS * SINGLE_EACH || seen[a->id])
                    fail_msg("id %lld made twice or out of range", a->id);
                seen[a->id] = 1;
                if (a->key >= 0) created_for_key[a->key]++;
            } else if (a->status != 200 || a->key < 0) {
                fail_msg("client %d request %d (key %d): status %d", c, i, a->key, a->status);
            }
            if (a->key < 0) continue;
            if (key_id[a->key] < 0) key_id[a->key] = a->id;
            if (key_id[a->key] != a->id)
                fail_msg("key %d answered ids %lld and %lld", a->key, key_id[a->key], a->id);
        }
    }
    for (int k = 0; k < SINGLE_KEYS; k++)
        if (key_id[k] >= 0 && created_for_key[k] != 1)
            fail_msg("key %d: %d messages made", k, created_for_key[k]);
    assert_int_equal(enqueued_total(q), created);
    long long requests = metric("retryd_enqueue_requests_total") - requests0;
    long long waited = metric("retryd_enqueue_waited_total") - waited0;
    long long calls = metric("retryd_enqueue_calls_total") - calls0;
    printf("# %lld single enqueues: %lld waited in the line, %lld calls\n", requests, waited, calls);
    assert_int_equal(requests, sent);
    assert_true(waited > 0);
    assert_true(calls < requests);
}

/* Duplicates sent together whose originals are large: the shared call's
 * answer stops before the original that would pass the library's reply
 * bytes (4 MiB), and the requests it left are sent again, first in the next
 * call. 8 messages of 800,000 bytes, each with its key; then 8 clients at
 * once, around a Redis that holds writes, send each key again: every one is
 * answered 200 with its own original (payload included), nothing new is
 * made, and the line took more calls than one for the seven that waited. */
typedef struct dup_client {
    pthread_t thread;
    int index;
    const char *queue;
    int status;
    long long id;
    size_t payload_len;
    char error[160];
} dup_client_t;

static void *dup_main(void *arg)
{
    dup_client_t *cl = arg;
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    char body[128], path[160];
    snprintf(body, sizeof body, "{\"payload\":\"again\",\"idempotency_key\":\"big-%d\"}", cl->index);
    snprintf(path, sizeof path, "/queues/%s/messages", cl->queue);
    if (e2e_try_request(&conn, g_daemon.port, &r, "POST", path, body, strlen(body)) != 0) {
        snprintf(cl->error, sizeof cl->error, "no answer");
    } else {
        cl->status = r.status;
        long long id = -1;
        if (r.json) rd_json_integer(rd_json_get(r.json, "id"), &id);
        cl->id = id;
        const char *p = r.json ? rd_json_string(rd_json_get(r.json, "payload")) : NULL;
        cl->payload_len = p ? strlen(p) : 0;
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    return NULL;
}

static void test_single_duplicates_of_large_originals_sent_again(void **state)
{
    (void)state;
    enum { N = 8, BIG = 800000 };
    char q[64];
    e2e_queue_name(q, sizeof q, "bigdups");
    char *p = malloc(BIG + 96);
    long long ids[N];
    for (int i = 0; i < N; i++) {
        int n = snprintf(p, 64, "{\"idempotency_key\":\"big-%d\",\"payload\":\"", i);
        memset(p + n, 'a' + i, BIG);
        snprintf(p + n + BIG, 8, "\"}");
        e2e_response_t r = { 0 };
        http_to(g_daemon.port, &r, "POST", messages_path(q), p, strlen(p));
        ids[i] = e2e_jint(e2e_expect_json(&r, 201), "id");
        e2e_response_free(&r);
    }
    free(p);
    long long calls0 = metric("retryd_enqueue_calls_total");
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 400 WRITE"));
    static dup_client_t clients[N];
    memset(clients, 0, sizeof clients);
    for (int c = 0; c < N; c++) {
        clients[c].index = c;
        clients[c].queue = q;
        assert_int_equal(pthread_create(&clients[c].thread, NULL, dup_main, &clients[c]), 0);
    }
    for (int c = 0; c < N; c++) pthread_join(clients[c].thread, NULL);
    for (int c = 0; c < N; c++) {
        if (clients[c].error[0]) fail_msg("client %d: %s", c, clients[c].error);
        if (clients[c].status != 200 || clients[c].id != ids[c] || clients[c].payload_len != BIG)
            fail_msg("client %d: status %d, id %lld (want %lld), payload of %zu bytes", c,
                     clients[c].status, clients[c].id, ids[c], clients[c].payload_len);
    }
    long long calls = metric("retryd_enqueue_calls_total") - calls0;
    printf("# %d duplicates of 800,000-byte originals: %lld calls\n", N, calls);
    assert_true(calls >= 3);   /* one alone, then the seven cut at the reply bytes */
    redisReply *x = e2e_rcmd(g_redis, "GET %s:{%s}:seq", g_prefix, q);
    assert_int_equal(atoll(x->str), N);
    freeReplyObject(x);
}

/* Redis refuses a call in the middle of a batch (over maxmemory after the
 * first call): the first call's items are 201, the refused call's 500, the
 * items after it 503 backend-unavailable (never sent), invalid ones still
 * 422, all in order in a 200; a batch whose first call fails answers as a
 * single enqueue would (500 here). */
static void test_redis_refusal_mid_batch(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-mid", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--max-body", "16777216",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "refused");
    /* 300 items of 10 KB: three calls of 100 (1 MB each). */
    char *p = malloc(10001);
    memset(p, 'z', 10000);
    p[10000] = '\0';
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "{\"messages\":[");
    for (int i = 0; i < 301; i++)
        rd_buf_printf(&b, "%s{\"payload\":\"%s\"%s}", i ? "," : "", i == 150 ? "" : p,
                      i == 150 ? ",\"max_retries\":0" : "");
    rd_buf_printf(&b, "]}");
    redisReply *info = e2e_rcmd(g_redis, "INFO memory");
    long long used = strtoll(strstr(info->str, "used_memory:") + 12, NULL, 10);
    freeReplyObject(info);
    freeReplyObject(e2e_rcmd(g_redis, "CONFIG SET maxmemory %lld", used + 1536 * 1024));
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    e2e_http_on(&conn, g_side.port, &r, "POST", messages_path(q), NULL, b.data, b.len);
    e2e_response_t again = { 0 };
    e2e_http_on(&conn, g_side.port, &again, "POST", messages_path(q), NULL, b.data, b.len);
    freeReplyObject(e2e_rcmd(g_redis, "CONFIG SET maxmemory 0"));
    const rd_json_t *results = expect_results(&r, 301);
    for (size_t i = 0; i < 301; i++) {
        const rd_json_t *it = rd_json_array_at(results, i);
        if (i == 150) {
            result_id(results, i, 422);
        } else if (i < 100) {
            result_id(results, i, 201);
        } else if (i < 201) {   /* the second call: items 100-200 but the invalid one */
            result_id(results, i, 500);
            assert_string_equal(e2e_jstr(it, "type"), "/problems/internal-error");
        } else {
            result_id(results, i, 503);
            assert_string_equal(e2e_jstr(it, "type"), "/problems/backend-unavailable");
        }
    }
    /* Nothing enqueued by the second request: its own answer. */
    e2e_expect_problem(&again, 500, "internal-error", NULL);
    e2e_response_free(&r);
    e2e_response_free(&again);
    e2e_conn_close(&conn);
    rd_buf_free(&b);
    free(p);
    redisReply *x = e2e_rcmd(g_redis, "GET %s:{%s}:seq", prefix, q);
    assert_int_equal(atoll(x->str), 100);
    freeReplyObject(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_batch_of_1000_in_order),
        T(test_invalid_items_answered_as_single_enqueues),
        T(test_not_a_batch_refused_on_the_field),
        T(test_items_at_the_payload_limit),
        T(test_nul_and_bad_utf8_refused_per_item),
        T(test_concurrent_batches_with_overlapping_keys),
        T(test_single_enqueues_sent_together),
        T(test_single_duplicates_of_large_originals_sent_again),
        T(test_redis_refusal_mid_batch),
    };
    int failed = cmocka_run_group_tests_name("e2e_batch", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
