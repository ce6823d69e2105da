/* test_faults_http.c - fault injection against the real build/retryd: HTTP limits and hostile clients (431, 501, 417,
 * Expect, slowloris, the connection cap, idle keep-alive), bearer-token auth,
 * the default bind, Redis ACL users and replies of an unexpected shape.
 *
 * The group setup, daemons and the helpers the fault suites share:
 * faults_common.h. */

#define FAULTS_SUITE "test_faults_http"
#include "faults_common.h"

/* ------------------------------------------------------------------------ */
/* Requests and what they answer                                            */
/* ------------------------------------------------------------------------ */

/* e2e_request and e2e_read_response, freeing what *r held first. */
static int request_fresh(e2e_conn_t *c, const char *method, const char *path, const char *extra,
                         const char *body, size_t body_len, e2e_response_t *r)
{
    e2e_response_free(r);
    return e2e_request(c, method, path, extra, body, body_len, r);
}

/* ========================================================================= */
/* 1. HTTP limits                                                            */
/* ========================================================================= */

/* Sends raw bytes on a fresh connection and reads one response (head too). */
static void raw_exchange(int port, const char *bytes, size_t len, e2e_conn_t *c,
                         e2e_response_t *r, char *head, size_t head_cap)
{
    assert_int_equal(e2e_conn_open(c, port), 0);
    assert_int_equal(e2e_send_all(c->fd, bytes, len), 0);
    if (fx_read_response_head(c, r, head, head_cap) != 0)
        fail_msg("no complete response to %.60s...", bytes);
}

static void test_header_over_16k_is_431(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "431");
    assert_int_equal(start_retryd(&g_dmn[0], "431.log", e2e_redis_url(g_shared_port), prefix, true,
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    char head[4096];

    /* A 20 KB header on an enqueue. */
    size_t big = 20 * 1024;
    char *hdr = malloc(big + 32);
    int n = snprintf(hdr, 32, "X-Big: ");
    memset(hdr + n, 'a', big);
    memcpy(hdr + n + big, "\r\n", 3);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/hdr/messages", hdr,
                                      "{\"payload\":\"big header\"}", 24), 0);
    int fd = dup(c.fd);   /* e2e closes its fd on "Connection: close"; watch this one */
    assert_int_equal(fx_read_response_head(&c, &r, head, sizeof head), 0);
    e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
    assert_string_equal(r.connection, "close");
    e2e_conn_close(&c);
    /* retryd ends its side after the reply (it drains what the client sent). */
    assert_true(fx_wait_closed(fd, 3000) >= 0);
    close(fd);

    /* A 20 KB request line. */
    char *path = malloc(big + 64);
    n = snprintf(path, 64, "/queues/hdr/messages?pad=");
    memset(path + n, 'b', big);
    path[n + big] = '\0';
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, "{\"payload\":\"big line\"}", 22),
                     0);
    assert_int_equal(fx_read_response_head(&c, &r, head, sizeof head), 0);
    e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
    e2e_conn_close(&c);
    free(path);

    /* 12 KB of header is within the 16 KiB limit. */
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'c', 12 * 1024);
    memcpy(hdr + 7 + 12 * 1024, "\r\n", 3);
    e2e_http_on(&g_conn, port, &r, "POST", "/queues/hdr/messages", hdr,
                "{\"payload\":\"fits\"}", 18);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    free(hdr);

    /* Redis: only the request that fitted was applied. */
    assert_int_equal(rq_int(g_shared, "GET %s:{hdr}:seq", prefix), 1);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "hdr", &count);
    assert_int_equal(count, 1);
    assert_string_equal(m[0].payload, "fits");
    stored_free(m, count);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

static void test_transfer_encoding_and_expect(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "te");
    assert_int_equal(start_retryd(&g_dmn[0], "te.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--max-body", "1024", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    e2e_conn_t c;
    char head[4096];

    /* gzip is not spoken: 501, never a hang and never compressed bytes as JSON. */
    static const char gzip[] = "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n"
                               "\x1f\x8b\x08\x00";
    raw_exchange(port, gzip, sizeof gzip - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 501, "not-implemented", NULL);
    assert_string_equal(r.connection, "close");
    e2e_conn_close(&c);

    static const char gzip_chunked[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n";
    raw_exchange(port, gzip_chunked, sizeof gzip_chunked - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 501, "not-implemented", NULL);
    e2e_conn_close(&c);

    /* chunked is accepted end to end. */
    static const char chunked[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
        "b\r\n{\"payload\":\r\n"
        "b\r\n\"in chunks\"\r\n"
        "1\r\n}\r\n0\r\n\r\n";
    raw_exchange(port, chunked, sizeof chunked - 1, &c, &r, head, sizeof head);
    rd_json_t *msg = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(msg, "id"), 1);
    assert_string_equal(e2e_jstr(msg, "payload"), "in chunks");
    e2e_conn_close(&c);

    /* Expect: 100-continue: the interim 100 comes before the body is sent. */
    static const char body[] = "{\"payload\":\"after continue\"}";
    assert_int_equal(e2e_conn_open(&c, port), 0);
    const char *h = e2e_fmt("POST /queues/te/messages HTTP/1.1\r\nHost: x\r\n"
                        "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                        "Content-Length: %zu\r\n\r\n", sizeof body - 1);
    assert_int_equal(e2e_send_all(c.fd, h, strlen(h)), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    assert_int_equal(r.status, 100);
    e2e_response_free(&r);
    assert_int_equal(e2e_send_all(c.fd, body, sizeof body - 1), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    msg = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(msg, "id"), 2);
    assert_string_equal(e2e_jstr(msg, "payload"), "after continue");
    /* The connection stays usable. */
    e2e_response_free(&r);
    assert_int_equal(request_fresh(&c, "GET", "/queues/te/messages/2", NULL, NULL, 0, &r), 0);
    e2e_expect_json(&r, 200);
    e2e_conn_close(&c);

    /* An announced body over --max-body: 413 at once, no 100, no body needed. */
    assert_int_equal(e2e_conn_open(&c, port), 0);
    h = "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n";
    assert_int_equal(e2e_send_all(c.fd, h, strlen(h)), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    e2e_conn_close(&c);

    /* Any other expectation: 417 problem. */
    static const char fancy[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Expect: fancy-feature\r\nContent-Length: 17\r\n\r\n{\"payload\":\"no\"}";
    raw_exchange(port, fancy, sizeof fancy - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 417, "expectation-failed", NULL);
    e2e_conn_close(&c);

    /* Redis: exactly the two accepted enqueues. */
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "te", &count);
    assert_int_equal(count, 2);
    assert_string_equal(m[0].payload, "in chunks");
    assert_string_equal(m[1].payload, "after continue");
    stored_free(m, count);
    assert_int_equal(rq_int(g_shared, "GET %s:{te}:seq", prefix), 2);
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}

/* Two slowloris clients (one trickling a body, one a header) are cut off
 * after --idle-timeout, while a normal client on another connection keeps
 * getting answers. */
static void test_slowloris_is_dropped_others_served(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "slow");
    assert_int_equal(start_retryd(&g_dmn[0], "slow.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--idle-timeout", "2s", NULL), 0);
    int port = g_dmn[0].port;
    static const char *const opening[2] = {
        "POST /queues/slow/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
        "POST /queues/slow/messages HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    };
    int slow[2];
    long long opened[2], closed_after[2] = { -1, -1 };
    for (int i = 0; i < 2; i++) {
        slow[i] = e2e_connect(port);
        assert_true(slow[i] >= 0);
        opened[i] = e2e_mono_ms();
        assert_int_equal(e2e_send_all(slow[i], opening[i], strlen(opening[i])), 0);
    }

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    e2e_response_t r = { 0 };
    long long start = e2e_mono_ms(), next_byte = start + 500, worst_ms = 0;
    int served = 0;
    while ((closed_after[0] < 0 || closed_after[1] < 0) && e2e_mono_ms() - start < 6000) {
        long long now = e2e_mono_ms();
        if (now >= next_byte) {
            for (int i = 0; i < 2; i++)
                if (closed_after[i] < 0) send(slow[i], "x", 1, MSG_NOSIGNAL);
            next_byte += 500;
        }
        for (int i = 0; i < 2; i++)
            if (closed_after[i] < 0 && fx_peer_closed(slow[i]))
                closed_after[i] = e2e_mono_ms() - opened[i];
        /* The normal client: one enqueue per turn, each answered promptly. */
        long long t0 = e2e_mono_ms();
        const char *body = e2e_fmt("{\"payload\":\"normal %d\"}", served + 1);
        if (request_fresh(&c, "POST", "/queues/normal/messages", NULL, body, strlen(body), &r) != 0)
            fail_msg("the normal client got no answer while slowloris clients were connected");
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), served + 1);
        e2e_response_free(&r);
        served++;
        if (e2e_mono_ms() - t0 > worst_ms) worst_ms = e2e_mono_ms() - t0;
        struct pollfd p[2] = { { .fd = slow[0], .events = POLLIN },
                               { .fd = slow[1], .events = POLLIN } };
        poll(p, 2, 50);
    }
    for (int i = 0; i < 2; i++) close(slow[i]);
    printf("# measured slowloris: body trickler closed after %lld ms, header trickler after %lld "
           "ms (--idle-timeout 2s); normal client: %d requests, slowest %lld ms\n",
           closed_after[0], closed_after[1], served, worst_ms);
    for (int i = 0; i < 2; i++) {
        if (closed_after[i] < 0) fail_msg("slowloris client %d still connected after 6 s", i);
        if (closed_after[i] > IDLE_CLOSE_BOUND_MS)
            fail_msg("slowloris client %d closed after %lld ms, bound %d", i, closed_after[i],
                     IDLE_CLOSE_BOUND_MS);
        if (closed_after[i] < IDLE_TIMEOUT_MS - 200)
            fail_msg("slowloris client %d closed after %lld ms, before the idle timeout", i,
                     closed_after[i]);
    }
    assert_true(served >= 10);
    assert_true(worst_ms < 1000);
    /* The normal connection was never closed under it. */
    assert_true(c.fd >= 0 && !fx_peer_closed(c.fd));
    e2e_conn_close(&c);

    /* Redis: nothing from the slow clients, every normal enqueue. */
    assert_int_equal(rq_int(g_shared, "EXISTS %s:{slow}:seq", prefix), 0);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "normal", &count);
    assert_int_equal(count, (size_t)served);
    for (int i = 0; i < served; i++)
        assert_string_equal(m[i].payload, e2e_fmt("normal %d", i + 1));
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* Opens n connections and gets /healthz 200 on each. True when all n were
 * served (they stay open); otherwise closes what it opened. */
static bool open_all_served(int port, e2e_conn_t *conns, int n)
{
    e2e_response_t r = { 0 };
    int i;
    for (i = 0; i < n; i++) {
        if (e2e_conn_open(&conns[i], port) != 0) break;
        if (request_fresh(&conns[i], "GET", "/healthz", NULL, NULL, 0, &r) != 0 ||
            r.status != 200) {
            e2e_conn_close(&conns[i]);
            break;
        }
    }
    e2e_response_free(&r);
    if (i == n) return true;
    for (int j = 0; j < i; j++) e2e_conn_close(&conns[j]);
    return false;
}

/* Polls open_all_served for up to bound_ms; returns how long it took or -1. */
static long long wait_all_served(int port, e2e_conn_t *conns, int n, int bound_ms)
{
    long long t0 = e2e_mono_ms();
    while (!open_all_served(port, conns, n)) {
        if (e2e_mono_ms() - t0 > bound_ms) return -1;
        e2e_pause_ms(50);
    }
    return e2e_mono_ms() - t0;
}

/* The cap on open connections: the 9th is closed at once, the first 8 keep
 * working, and the places come back however a connection ends (the client
 * closes, the idle timeout, the linger after an error reply). */
static void test_max_connections(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "maxconn");
    assert_int_equal(start_retryd(&g_dmn[0], "maxconn.log", e2e_redis_url(g_shared_port), prefix,
                                  true, "--max-connections", "8", "--idle-timeout", "2s",
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_conn_t cs[8];
    e2e_response_t r = { 0 };
    /* Eight connections, each known to be accepted (it answered). */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(e2e_conn_open(&cs[i], port), 0);
        assert_int_equal(request_fresh(&cs[i], "GET", "/healthz", NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }
    /* The ninth: the kernel completes the handshake, retryd closes it at once. */
    int ninth = e2e_connect(port);
    assert_true(ninth >= 0);
    long long closed_ms = fx_wait_closed(ninth, 3000);
    close(ninth);
    printf("# measured max-connections 8: the 9th connection closed after %lld ms\n", closed_ms);
    if (closed_ms < 0) fail_msg("the 9th connection was not closed within 3 s");
    assert_true(closed_ms <= 1000);

    /* The first eight still work. */
    for (int i = 0; i < 8; i++) {
        const char *body = e2e_fmt("{\"payload\":\"conn %d\"}", i);
        if (request_fresh(&cs[i], "POST", "/queues/mc/messages", NULL, body, strlen(body), &r) != 0)
            fail_msg("connection %d got no answer after the 9th was refused", i);
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i + 1);
    }
    /* One leaves: a newcomer gets its place (once retryd saw the close). */
    e2e_conn_close(&cs[0]);
    long long deadline = e2e_mono_ms() + 3000;
    e2e_conn_t fresh = { .fd = -1 };
    for (;;) {
        if (e2e_conn_open(&fresh, port) == 0 &&
            request_fresh(&fresh, "POST", "/queues/mc/messages", NULL, "{\"payload\":\"newcomer\"}",
                          22, &r) == 0)
            break;
        e2e_conn_close(&fresh);
        if (e2e_mono_ms() > deadline) fail_msg("no connection accepted 3 s after one closed");
        e2e_pause_ms(20);
    }
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 9);
    for (int i = 1; i < 8; i++) {
        assert_int_equal(
            request_fresh(&cs[i], "GET", "/queues/mc/messages/9", NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }

    /* The eight go quiet without closing: the idle timeout frees their places. */
    e2e_conn_t next[8];
    long long idle_freed_ms = wait_all_served(port, next, 8, 5000);
    if (idle_freed_ms < 0) fail_msg("8 new connections not served 5 s after 8 went idle");
    for (int i = 1; i < 8; i++) e2e_conn_close(&cs[i]);
    e2e_conn_close(&fresh);

    /* Eight error replies (431) whose clients keep the socket open: the
     * linger after the reply ends, and frees the places too. */
    char *hdr = malloc(20 * 1024 + 16);
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'h', 20 * 1024);
    memcpy(hdr + 7 + 20 * 1024, "\r\n", 3);
    int held[8];
    char head[1024];
    for (int i = 0; i < 8; i++) {
        held[i] = dup(next[i].fd);   /* keeps the socket open after e2e closes its fd */
        assert_int_equal(e2e_send_request(&next[i], "GET", "/healthz", hdr, NULL, 0), 0);
        assert_int_equal(fx_read_response_head(&next[i], &r, head, sizeof head), 0);
        e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
        e2e_conn_close(&next[i]);
    }
    free(hdr);
    int extra = e2e_connect(port);
    assert_true(extra >= 0);
    long long extra_closed = fx_wait_closed(extra, 3000);
    close(extra);
    if (extra_closed < 0 || extra_closed > 1000)
        fail_msg("with 8 lingering connections a new one was not refused at once (%lld ms)",
                 extra_closed);
    long long linger_freed_ms = wait_all_served(port, next, 8, 5000);
    for (int i = 0; i < 8; i++) close(held[i]);
    if (linger_freed_ms < 0) fail_msg("8 new connections not served 5 s after 8 error replies");
    for (int i = 0; i < 8; i++) e2e_conn_close(&next[i]);
    printf("# measured max-connections 8: places freed by the idle timeout after %lld ms, by "
           "the linger after 431 replies after %lld ms\n", idle_freed_ms, linger_freed_ms);
    e2e_response_free(&r);

    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "mc", &count);
    assert_int_equal(count, 9);
    for (int i = 0; i < 8; i++) assert_string_equal(m[i].payload, e2e_fmt("conn %d", i));
    assert_string_equal(m[8].payload, "newcomer");
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* An idle keep-alive connection, and one that never sends a byte, are
 * closed after --idle-timeout; a connection in use every 400 ms is not,
 * however long it lives. */
static void test_idle_keep_alive_is_closed(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "idle");
    assert_int_equal(start_retryd(&g_dmn[0], "idle.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--idle-timeout", "2s", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    e2e_conn_t idle, busy;
    assert_int_equal(e2e_conn_open(&idle, port), 0);
    assert_int_equal(e2e_conn_open(&busy, port), 0);
    int silent = e2e_connect(port);
    assert_true(silent >= 0);
    long long silent_opened = e2e_mono_ms();
    /* A long-poll longer than the idle timeout is a request in progress,
     * not an idle connection: it gets its 204 after 3 s. */
    e2e_conn_t waiting;
    assert_int_equal(e2e_conn_open(&waiting, port), 0);
    assert_int_equal(e2e_send_request(&waiting, "POST", "/queues/idle-none/claim", NULL,
                                      "{\"wait_seconds\":3}", 18), 0);
    long long waiting_sent = e2e_mono_ms(), waiting_answered = -1;
    assert_int_equal(request_fresh(&idle, "POST", "/queues/idle/messages", NULL,
                                   "{\"payload\":\"then idle\"}", 23, &r), 0);
    e2e_expect_json(&r, 201);
    long long idle_since = e2e_mono_ms();
    int busy_fd = busy.fd, busy_requests = 0;
    long long idle_closed = -1, silent_closed = -1, next_busy = 0;
    while (e2e_mono_ms() - idle_since < 4500) {
        long long now = e2e_mono_ms();
        if (idle_closed < 0 && fx_peer_closed(idle.fd)) idle_closed = now - idle_since;
        if (silent_closed < 0 && fx_peer_closed(silent)) silent_closed = now - silent_opened;
        if (waiting_answered < 0) {
            struct pollfd pw = { .fd = waiting.fd, .events = POLLIN };
            if (poll(&pw, 1, 0) == 1) waiting_answered = now - waiting_sent;
        }
        if (now >= next_busy) {
            const char *body = e2e_fmt("{\"payload\":\"busy %d\"}", busy_requests + 1);
            if (request_fresh(&busy, "POST", "/queues/idle/messages", NULL, body, strlen(body),
                              &r) != 0)
                fail_msg("the busy connection failed after %lld ms", now - idle_since);
            e2e_expect_json(&r, 201);
            busy_requests++;
            next_busy = now + 400;
        }
        e2e_pause_ms(10);
    }
    printf("# measured idle-timeout 2s: idle keep-alive closed after %lld ms, silent connection "
           "after %lld ms; a connection used every 400 ms stayed open for 4.5 s\n", idle_closed,
           silent_closed);
    close(silent);
    if (read_fresh(&waiting, &r) != 0)
        fail_msg("the 3 s long-poll got no response under --idle-timeout 2s");
    assert_int_equal(r.status, 204);
    e2e_conn_close(&waiting);
    printf("# measured idle-timeout 2s: a long-poll with wait_seconds 3 answered 204 after %lld "
           "ms\n", waiting_answered);
    assert_true(waiting_answered >= 2900 && waiting_answered <= 4000);
    if (idle_closed < 0) fail_msg("the idle keep-alive connection is still open after 4.5 s");
    if (silent_closed < 0) fail_msg("the silent connection is still open after 4.5 s");
    assert_true(idle_closed >= IDLE_TIMEOUT_MS - 200 && idle_closed <= IDLE_CLOSE_BOUND_MS);
    assert_true(silent_closed >= IDLE_TIMEOUT_MS - 200 && silent_closed <= IDLE_CLOSE_BOUND_MS);
    assert_int_equal(busy.fd, busy_fd);
    assert_false(fx_peer_closed(busy.fd));
    e2e_conn_close(&busy);
    e2e_conn_close(&idle);
    e2e_response_free(&r);

    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "idle", &count);
    assert_int_equal(count, (size_t)busy_requests + 1);
    assert_string_equal(m[0].payload, "then idle");
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* ========================================================================= */
/* 2. Auth                                                                   */
/* ========================================================================= */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const char *in, char *out)
{
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)in[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

typedef struct route {
    const char *method, *path, *body;
} route_t;

static void test_auth_bearer_token(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "auth");
    char token[65], file[PATH_MAX], log[PATH_MAX];
    assert_int_equal(fx_random_hex(token, 48), 0);
    SET(file, tmp_path("token"));
    SET(log, tmp_path("auth.log"));
    assert_int_equal(fx_write_file(file, e2e_fmt("%s\n", token)), 0);
    assert_int_equal(start_retryd(&g_dmn[0], "auth.log", e2e_redis_url(g_shared_port), prefix,
                                  false, "--auth-token-file", file, "--log-level", "debug",
                                  NULL), 0);
    int port = g_dmn[0].port;

    static const route_t routes[] = {
        { "POST", "/queues/a/messages", "{\"payload\":\"denied\"}" },
        { "GET", "/queues/a/messages", NULL },
        { "GET", "/queues/a/messages/1", NULL },
        { "POST", "/queues/a/claim", NULL },
        { "POST", "/queues/a/messages/1/succeed", NULL },
        { "POST", "/queues/a/succeed", "{\"messages\":[{\"id\":1}]}" },
        { "POST", "/queues/a/messages/1/fail", "{\"error\":\"x\"}" },
        { "POST", "/queues/a/messages/1/extend", NULL },
        { "POST", "/queues/a/messages/1/snooze", "{\"delay_seconds\":0}" },
        { "POST", "/queues/a/messages/1/replay", NULL },
        { "POST", "/queues/a/messages/1/kill", NULL },
        { "POST", "/queues/a/replay", "{\"all\":true}" },
        { "DELETE", "/queues/a/messages/1", NULL },
        { "GET", "/queues", NULL },
        { "GET", "/queues/a/stats", NULL },
        { "GET", "/metrics", NULL },
        { "GET", "/readyz", NULL },
        { "POST", "/queues/a/messages", "{}" },          /* 401 before 422 */
        { "POST", "/queues/a/messages", "{not json" },   /* 401 before 400 */
    };
    char basic_cred[160], basic[256], prefix_tok[80], plus_one[80];
    base64(e2e_fmt("retryd:%s", token), basic_cred);
    snprintf(basic, sizeof basic, "Authorization: Basic %s\r\n", basic_cred);
    snprintf(prefix_tok, sizeof prefix_tok, "%.*s", (int)strlen(token) - 1, token);
    snprintf(plus_one, sizeof plus_one, "%sx", token);
    char variants[8][256];
    const char *names[8] = { "missing", "wrong", "prefix", "token+1", "Basic", "empty Bearer",
                             "no scheme", "other scheme" };
    variants[0][0] = '\0';
    SET(variants[1], "Authorization: Bearer 0123456789abcdef\r\n");
    SET(variants[2], e2e_fmt("Authorization: Bearer %s\r\n", prefix_tok));
    SET(variants[3], e2e_fmt("Authorization: Bearer %s\r\n", plus_one));
    SET(variants[4], basic);
    SET(variants[5], "Authorization: Bearer\r\n");
    SET(variants[6], e2e_fmt("Authorization: %s\r\n", token));
    SET(variants[7], e2e_fmt("Authorization: Token %s\r\n", token));

    e2e_conn_t c = { .fd = -1 };
    e2e_response_t r = { 0 };
    char head[4096], www[256];
    int denied = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        for (int v = 0; v < 8; v++) {
            if (c.fd < 0) {
                e2e_conn_close(&c);  /* what the closed one had read */
                assert_int_equal(e2e_conn_open(&c, port), 0);
            }
            const route_t *rt = &routes[i];
            assert_int_equal(e2e_send_request(&c, rt->method, rt->path,
                                              variants[v][0] ? variants[v] : NULL, rt->body,
                                              rt->body ? strlen(rt->body) : 0), 0);
            if (fx_read_response_head(&c, &r, head, sizeof head) != 0)
                fail_msg("%s %s (%s): no response", rt->method, rt->path, names[v]);
            if (r.status != 401)
                fail_msg("%s %s with the token %s: %d, expected 401: %s", rt->method, rt->path,
                         names[v], r.status, r.body);
            e2e_expect_problem(&r, 401, "unauthorized", NULL);
            if (!fx_head_header(head, "WWW-Authenticate", www, sizeof www) ||
                strncmp(www, "Bearer", 6) != 0)
                fail_msg("%s %s (%s): no WWW-Authenticate: Bearer header", rt->method, rt->path,
                         names[v]);
            e2e_response_free(&r);
            denied++;
        }
    }
    /* /healthz and /openapi.json are open with or without a token. (A
     * refused request with a body closed its connection: a 401 at its
     * headers, the body unread.) */
    static const char *const open_paths[] = { "/healthz", "/openapi.json" };
    if (c.fd < 0) {
        e2e_conn_close(&c);
        assert_int_equal(e2e_conn_open(&c, port), 0);
    }
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(request_fresh(&c, "GET", open_paths[i], NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
        assert_int_equal(request_fresh(&c, "GET", open_paths[i], variants[1], NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }
    e2e_conn_close(&c);

    /* The right token: normal answers on every route. */
    char ok[160];
    SET(ok, e2e_fmt("Authorization: Bearer %s\r\n", token));
    struct step {
        const char *method, *path, *body;
        int status;
    } steps[] = {
        { "GET", "/readyz", NULL, 200 },
        { "POST", "/queues/a/messages", "{\"payload\":\"allowed\"}", 201 },
        { "GET", "/queues/a/messages/1", NULL, 200 },
        { "GET", "/queues/a/messages", NULL, 200 },
        { "POST", "/queues/a/claim", "{\"lease_seconds\":30}", 200 },
        { "POST", "/queues/a/messages/1/extend", "{\"lease_seconds\":60}", 200 },
        { "POST", "/queues/a/messages/1/fail", "{\"error\":\"boom\",\"retryable\":false}", 200 },
        { "POST", "/queues/a/messages/1/replay", NULL, 200 },
        { "POST", "/queues/a/replay", "{\"all\":true}", 200 },
        { "POST", "/queues/a/claim", NULL, 200 },
        { "POST", "/queues/a/messages/1/succeed", NULL, 200 },
        { "POST", "/queues/a/succeed", "{\"messages\":[{\"id\":1}]}", 200 },
        { "POST", "/queues/a/messages", "{\"payload\":\"doomed\"}", 201 },
        { "POST", "/queues/a/messages/2/kill", NULL, 200 },
        { "DELETE", "/queues/a/messages/2", NULL, 204 },
        { "GET", "/queues", NULL, 200 },
        { "GET", "/queues/a/stats", NULL, 200 },
        { "GET", "/metrics", NULL, 200 },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        e2e_http_on(&g_conn, port, &r, steps[i].method, steps[i].path, ok, steps[i].body,
                    steps[i].body ? strlen(steps[i].body) : 0);
        if (r.status != steps[i].status)
            fail_msg("%s %s with the right token: %d, expected %d: %s", steps[i].method,
                     steps[i].path, r.status, steps[i].status, r.body);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    /* Redis: the denied enqueues created nothing. */
    assert_int_equal(rq_int(g_shared, "GET %s:{a}:seq", prefix), 2);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "a", &count);
    assert_int_equal(count, 1);
    assert_int_equal(m[0].id, 1);
    assert_string_equal(m[0].payload, "allowed");
    assert_string_equal(m[0].status, "succeeded");
    stored_free(m, count);

    /* The token never reaches the log, even at debug level. */
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(log);
    assert_non_null(text);
    bool debug_seen = strstr(text, " debug ") != NULL;
    bool leaked = strstr(text, prefix_tok) != NULL ||
                  strstr(text, e2e_fmt("%.16s", token)) != NULL ||
                  strstr(text, basic_cred) != NULL;
    size_t log_len = strlen(text);
    free(text);
    printf("# measured auth: %d denied requests (18 requests x 8 bad credentials), log %zu bytes\n",
           denied, log_len);
    assert_true(debug_seen);
    if (leaked) fail_msg("the bearer token (or a part of it) appears in retryd's log %s", log);
}

static void test_default_bind_is_loopback(void **state)
{
    (void)state;
    char out[PATH_MAX];
    SET(out, tmp_path("help.txt"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("RETRYD_LISTEN");
        execl(g_bin, g_bin, "--help", (char *)NULL);
        _exit(127);
    }
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    char *text = fx_read_file(out);
    assert_non_null(text);
    bool listen_default = strstr(text, "--listen") && strstr(text, "127.0.0.1:8080");
    bool any_host = strstr(text, "0.0.0.0") != NULL;
    free(text);
    assert_true(listen_default);
    assert_false(any_host);
}

/* Redis ACL: a user with a password from the URL; a wrong password is a 503
 * daemon that keeps running; passwords never reach the log. */
static void test_redis_acl_user(void **state)
{
    (void)state;
    assert_int_equal(fx_redis_start(&g_srv, NULL), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    redisReply *x = e2e_rcmd(g_admin, "ACL SETUSER retryd on >s3cret ~* &* +@all");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "CONFIG SET requirepass d3fault-pw");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "AUTH d3fault-pw");
    freeReplyObject(x);
    /* Anonymous clients are refused now. */
    redisContext *anon = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(anon);
    x = e2e_rcmd(anon, "GET x");
    assert_int_equal(x->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(x->str, "NOAUTH"));
    freeReplyObject(x);
    redisFree(anon);

    char good[128], wrong[128], dflt[128];
    SET(good, e2e_fmt("redis://retryd:s3cret@127.0.0.1:%d", g_srv.port));
    SET(wrong, e2e_fmt("redis://retryd:Wr0ngPassw0rd@127.0.0.1:%d", g_srv.port));
    SET(dflt, e2e_fmt("redis://:d3fault-pw@127.0.0.1:%d", g_srv.port));
    e2e_response_t r = { 0 };

    /* The ACL user: ready, 201, and the message is in Redis. */
    assert_int_equal(start_retryd(&g_dmn[0], "acl-good.log", good, "aclok", true, "--log-level",
                                  "debug", NULL), 0);
    http(g_dmn[0].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"via acl user\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    char field[64];
    assert_string_equal(e2e_message_field(g_admin, "aclok:{acl}", 1, "payload", field, sizeof field),
                        "via acl user");
    x = e2e_rcmd(g_admin, "CLIENT LIST");
    int as_retryd = 0;
    for (const char *p = x->str; (p = strstr(p, " user=retryd ")) != NULL; p++) as_retryd++;
    freeReplyObject(x);
    assert_true(as_retryd >= 2);   /* the command link and the notification link */

    /* A wrong password: /readyz and every Redis route 503, the process lives. */
    assert_int_equal(start_retryd(&g_dmn[1], "acl-wrong.log", wrong, "aclbad", false,
                                  "--log-level", "debug", NULL), 0);
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {   /* until the refusal was seen (and logged) */
        char *text = fx_read_file(tmp_path("acl-wrong.log"));
        bool refused = text && strstr(text, "AUTH failed");
        free(text);
        if (refused) break;
        if (e2e_mono_ms() > deadline) fail_msg("retryd never logged the failed AUTH");
        e2e_pause_ms(20);
    }
    for (int i = 0; i < 3; i++) {
        http(g_dmn[1].port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        http(g_dmn[1].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"refused\"}");
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        assert_true(r.retry_after[0] != '\0');
    }
    assert_true(e2e_daemon_alive(&g_dmn[1]));
    x = e2e_rcmd(g_admin, "KEYS aclbad*");
    assert_int_equal(x->elements, 0);
    freeReplyObject(x);

    /* redis://:password@ (docs/reference.md "Daemon"): the default user. */
    assert_int_equal(start_retryd(&g_dmn[2], "acl-default.log", dflt, "acldef", true, NULL), 0);
    http(g_dmn[2].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"via default\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    assert_string_equal(e2e_message_field(g_admin, "acldef:{acl}", 1, "payload", field,
                                          sizeof field), "via default");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    /* A user that may not FUNCTION LOAD: never ready, 503, never a crash. */
    x = e2e_rcmd(g_admin, "ACL SETUSER nofn on >n0fn-pw ~* &* +@all -function");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    assert_int_equal(start_retryd(&g_dmn[3], "acl-nofn.log",
                                  e2e_fmt("redis://nofn:n0fn-pw@127.0.0.1:%d", g_srv.port),
                                  "aclnofn", false, NULL), 0);
    deadline = e2e_mono_ms() + 5000;
    for (;;) {
        char *text = fx_read_file(tmp_path("acl-nofn.log"));
        bool refused = text && strstr(text, "NOPERM");
        free(text);
        if (refused) break;
        if (e2e_mono_ms() > deadline) fail_msg("retryd never logged the refused FUNCTION LOAD");
        e2e_pause_ms(20);
    }
    http(g_dmn[3].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"no function\"}");
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http(g_dmn[3].port, &r, "GET", "/readyz", NULL);
    assert_int_equal(r.status, 503);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    const char *logs[4] = { "acl-good.log", "acl-wrong.log", "acl-default.log", "acl-nofn.log" };
    for (int i = 0; i < 4; i++) stop_retryd(&g_dmn[i]);
    for (int i = 0; i < 4; i++) {
        char *text = fx_read_file(tmp_path(logs[i]));
        assert_non_null(text);
        bool leaked = strstr(text, "s3cret") || strstr(text, "Wr0ngPassw0rd") ||
                      strstr(text, "d3fault-pw") || strstr(text, "n0fn-pw");
        free(text);
        if (leaked) fail_msg("a Redis password appears in %s", logs[i]);
    }
}

/* Waits (bounded) for d to exit; returns its exit status, -1 when it did not. */
static int wait_exit(e2e_daemon_t *d, int bound_ms)
{
    long long deadline = e2e_mono_ms() + bound_ms;
    int wstatus;
    while (!e2e_daemon_exited(d, &wstatus)) {
        if (e2e_mono_ms() > deadline) return -1;
        e2e_pause_ms(10);
    }
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

/* A bad --redis URL (or RETRYD_REDIS, or --redis-cluster) is refused with
 * exit 2 and named on stderr with its password masked (docs/reference.md "Daemon"). */
static void test_bad_redis_url_password_not_echoed(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        { "--redis", "redis://:Pa55-secret@127.0.0.1:notaport" },
        { "--redis", "redis://alice:Pa55-secret@127.0.0.1:70000" },
        { "--redis-cluster", "redis://:Pa55-secret@127.0.0.1:1,nohostport" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char log[PATH_MAX];
        SET(log, tmp_path(e2e_fmt("badurl-%zu.log", i)));
        const char *args[] = { bad[i][0], bad[i][1], NULL };
        assert_int_equal(e2e_daemon_spawn_logged(&g_dmn[0], NULL, g_bin, args, log), 0);
        assert_int_equal(wait_exit(&g_dmn[0], 5000), 2);
        char *text = fx_read_file(log);
        assert_non_null(text);
        bool leaked = strstr(text, "Pa55-secret") != NULL;
        bool masked = strstr(text, ":***@127.0.0.1") != NULL;
        if (leaked || !masked) fail_msg("stderr for %s %s:\n%s", bad[i][0], bad[i][1], text);
        free(text);
    }
}

/* A Functions library that answers every call with a reply of the wrong
 * shape: a bare integer, a string, nil, an empty array, arrays too short or
 * with the wrong types (what another version of the library may answer).
 * Registered under the names this retryd calls. */
static const char *fake_library(void)
{
#define FN(name) "'" RD_FUNCTION(name) "'"
    return "#!lua name=retryd_fake_shapes\n"
           "local function reg(n, f, ro)\n"
           "  redis.register_function{ function_name = n, callback = f,\n"
           "                           flags = ro and { 'no-writes' } or nil }\n"
           "end\n"
           "reg(" FN("enqueue") ", function() return { 'ok' } end)\n"
           /* claim by count: {} or leased messages (by position) cut short,
            * with an odd tail, a history that is not an array, an integer
            * payload, a message that is not an array. */
           "local leased = { ['2'] = { 1, 'p', 0, 3, 1, 2, 3 },\n"
           "  ['3'] = { 1, 'p', 0, 3, 1, 2, 3, 'tok', 'worker' },\n"
           "  ['4'] = { 1, 'p', 0, 3, 1, 2, 3, 'tok', 'history', 'x' },\n"
           "  ['5'] = { 1, 7, 0, 3, 1, 2, 3, 'tok' }, ['6'] = 'x' }\n"
           "reg(" FN("claim") ", function(k, a)\n"
           "  if leased[a[2]] then return { 'ok', leased[a[2]], -1 } end\n"
           "  return {}\n"
           "end)\n"
           "reg(" FN("settle_claim") ", function()\n"
           "  return { 'ok', { 'succeeded' }, leased['3'], -1 }\n"
           "end)\n"
           "reg(" FN("succeed") ", function() return nil end)\n"
           "reg(" FN("fail") ", function() return { 'ok', 'not a message' } end)\n"
           "reg(" FN("extend") ", function() return { 'ok', { 'id' } } end)\n"
           "reg(" FN("replay") ", function() return { 'invalid_state' } end)\n"
           "reg(" FN("get") ", function() return 'just a string' end, true)\n"
           "reg(" FN("list") ", function() return 7 end, true)\n"
           "reg(" FN("stats") ", function() return { 1, 2, 3 } end, true)\n"
           "reg(" FN("export") ", function() return 1 end, true)\n"
           "reg(" FN("replay_many") ", function() return 5 end)\n"
           "reg(" FN("succeed_many") ", function() return 3 end)\n"
           "reg(" FN("release") ", function() return 'x' end)\n"
           "reg(" FN("delete") ", function() return { {} } end)\n"
           "reg(" FN("kill") ", function() return { 'ok', 5 } end)\n"
           "reg(" FN("purge") ", function() return 'x' end)\n"
           "reg(" FN("promote") ", function() return 'x' end)\n"
           "reg(" FN("reclaim") ", function() return 'x' end)\n"
           "reg(" FN("tick") ", function() return { 'a', 'b' } end)\n";
#undef FN
}

/* Every reply of an unexpected shape is an error answer (500, or 503), never
 * a crash; the daemon logs what it got and stops cleanly (docs/reference.md "Rolling upgrade"). */
static void test_unexpected_reply_shapes(void **state)
{
    (void)state;
    assert_int_equal(fx_redis_start(&g_srv, NULL), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    assert_int_equal(start_retryd(&g_dmn[0], "shapes.log",
                                  e2e_fmt("redis://127.0.0.1:%d", g_srv.port), "shapes", true,
                                  NULL), 0);
    e2e_response_t r = { 0 };
    http(g_dmn[0].port, &r, "POST", "/queues/q/messages", "{\"payload\":\"real\"}");
    e2e_expect_json(&r, 201);

    /* The real library out and the fake in, in one transaction: between two
     * separate commands the daemon could meet the missing functions, load its
     * library again, and the fake's names would then be taken. */
    redisReply *x = e2e_rcmd(g_admin, "MULTI");
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "FUNCTION DELETE %s", RD_LIBRARY_NAME);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "FUNCTION LOAD %s", fake_library());
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "EXEC");
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 2 ||
        x->element[0]->type != REDIS_REPLY_STATUS || x->element[1]->type != REDIS_REPLY_STRING)
        fail_msg("swapping in the fake library: %s",
                 x->type == REDIS_REPLY_ARRAY && x->elements == 2 && x->element[1]->str
                     ? x->element[1]->str : "unexpected EXEC reply");
    freeReplyObject(x);

    static const struct { const char *method, *path, *body; } calls[] = {
        /* The list reply's bad_cursor check once indexed a bare integer. */
        { "POST", "/queues/q/replay", "{\"all\":true}" },
        { "POST", "/queues/q/replay", "{\"error_contains\":\"x\"}" },
        { "POST", "/queues/q/replay", "{\"ids\":[1,2]}" },
        { "POST", "/queues/q/messages", "{\"payload\":\"p\"}" },
        { "POST", "/queues/q/messages", "{\"payload\":\"p\",\"idempotency_key\":\"k\"}" },
        { "POST", "/queues/q/claim", NULL },
        { "POST", "/queues/q/claim", "{\"count\":2}" },
        { "POST", "/queues/q/claim", "{\"count\":3}" },
        { "POST", "/queues/q/claim", "{\"count\":4}" },
        { "POST", "/queues/q/claim", "{\"count\":5}" },
        { "POST", "/queues/q/claim", "{\"count\":6}" },
        { "POST", "/queues/q/claim", "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}" },
        { "POST", "/queues/q/messages/1/succeed", NULL },
        { "POST", "/queues/q/messages/1/fail", "{\"error\":\"e\"}" },
        { "POST", "/queues/q/messages/1/extend", NULL },
        { "POST", "/queues/q/messages/1/replay", NULL },
        { "POST", "/queues/q/messages/1/kill", NULL },
        { "DELETE", "/queues/q/messages/1", NULL },
        { "GET", "/queues/q/messages/1", NULL },
        { "GET", "/queues/q/messages", NULL },
        { "GET", "/queues/q/messages?status=dead", NULL },
        { "GET", "/queues/q/stats", NULL },
        { "GET", "/queues", NULL },
        { "GET", "/metrics", NULL },
        { "POST", "/queues/q/succeed", "{\"messages\":[{\"id\":1}]}" },
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        const char *body = calls[i].body;
        e2e_conn_close(&g_conn);
        e2e_response_free(&r);
        int rc = e2e_try_request(&g_conn, g_dmn[0].port, &r, calls[i].method, calls[i].path,
                                 body, body ? strlen(body) : 0);
        if (rc != 0) {
            e2e_pause_ms(100);  /* a crash may take a moment to be reaped */
            fail_msg("%s %s: no answer, retryd %s", calls[i].method, calls[i].path,
                     e2e_daemon_alive(&g_dmn[0]) ? "alive" : "died");
        }
        /* The fan-outs (/queues, /metrics) leave out a queue whose stats failed. */
        if ((strcmp(calls[i].path, "/metrics") == 0 || strcmp(calls[i].path, "/queues") == 0) &&
            r.status == 200)
            continue;
        if (r.status == 500) e2e_expect_problem_type(&r, 500, "internal-error");
        else if (r.status != 503 || !e2e_media_type_is(r.content_type, "application/problem+json"))
            fail_msg("%s %s answered %d: %s", calls[i].method, calls[i].path, r.status, r.body);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    /* A few ticks of the promoter against the same library. */
    e2e_pause_ms(5 * TICK_MS);
    assert_true(e2e_daemon_alive(&g_dmn[0]));
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(tmp_path("shapes.log"));
    assert_non_null(text);
    bool logged = strstr(text, "unexpected reply") != NULL;
    free(text);
    if (!logged) fail_msg("retryd did not log the unexpected replies");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_header_over_16k_is_431),
        T(test_transfer_encoding_and_expect),
        T(test_slowloris_is_dropped_others_served),
        T(test_max_connections),
        T(test_idle_keep_alive_is_closed),
        T(test_auth_bearer_token),
        T(test_default_bind_is_loopback),
        T(test_redis_acl_user),
        T(test_bad_redis_url_password_not_echoed),
        T(test_unexpected_reply_shapes),
    };
    return cmocka_run_group_tests_name("faults_http", tests, group_setup, group_teardown);
}
