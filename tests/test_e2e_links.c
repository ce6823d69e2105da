/* test_e2e_links.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: connections (keep-alive, pipelining), concurrent claims,
 * Redis faults and shutdown, and the memory a client can pin.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_links"
#include "e2e_common.h"

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

static void test_keep_alive_50_requests(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "keepalive");
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    int fd = c.fd;
    e2e_response_t r = { 0 };
    for (int i = 0; i < 50; i++) {
        char body[1024];
        SET(body, e2e_fmt("{\"payload\":\"k%d\"}", i));
        int rc = i % 2 == 0
            ? e2e_request(&c, "POST", messages_path(q), NULL, body, strlen(body), &r)
            : e2e_request(&c, "GET", message_path(q, i / 2 + 1, NULL), NULL, NULL, 0, &r);
        if (rc != 0) fail_msg("request %d on the kept-alive connection failed", i);
        rd_json_t *m = e2e_expect_json(&r, i % 2 == 0 ? 201 : 200);
        assert_int_equal(e2e_jint(m, "id"), i / 2 + 1);
        assert_string_equal(e2e_jstr(m, "payload"), e2e_fmt("k%d", i - i % 2));
        assert_true(strcasecmp(r.connection, "close") != 0);
        assert_int_equal(c.fd, fd);
        e2e_response_free(&r);
    }
    e2e_conn_close(&c);
}

static void test_pipelined_requests_answered_in_order(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "pipeline");
    size_t len1 = 0, len2 = 0, len3 = 0;
    char *a = e2e_format_request("POST", messages_path(q), NULL, "{\"payload\":\"first\"}", 19,
                                 &len1);
    char *b = e2e_format_request("POST", messages_path(q), NULL, "{\"payload\":\"second\"}", 20,
                                 &len2);
    char *g = e2e_format_request("GET", message_path(q, 1, NULL), NULL, NULL, 0, &len3);
    char *all = malloc(len1 + len2 + len3);
    memcpy(all, a, len1);
    memcpy(all + len1, b, len2);
    memcpy(all + len1 + len2, g, len3);

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    assert_int_equal(e2e_send_all(c.fd, all, len1 + len2 + len3), 0);
    free(a);
    free(b);
    free(g);
    free(all);

    e2e_response_t r = { 0 };
    assert_int_equal(e2e_read_response(&c, &r), 0);
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "first");
    e2e_response_free(&r);
    assert_int_equal(e2e_read_response(&c, &r), 0);
    m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 2);
    assert_string_equal(e2e_jstr(m, "payload"), "second");
    e2e_response_free(&r);
    assert_int_equal(e2e_read_response(&c, &r), 0);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "first");
    assert_int_equal(c.in_len, 0);
    e2e_response_free(&r);
    e2e_conn_close(&c);
}

/* ------------------------------------------------------------------------ */
/* Concurrency                                                              */
/* ------------------------------------------------------------------------ */

enum { WORKERS = 8, MESSAGES = 400 };

/* Claims and succeeds until the queue answers 204. No cmocka asserts here:
 * problems go to w->error for the main thread to report. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    e2e_conn_t c;
    e2e_response_t r = { 0 };
    char claim[128], token[160];
    snprintf(claim, sizeof claim, "/queues/%s/claim", w->queue);
    const char *lease = "{\"lease_seconds\":60}";
    if (e2e_conn_open(&c, g_daemon.port) != 0) {
        snprintf(w->error, sizeof w->error, "connect: %s", strerror(errno));
        return NULL;
    }
    for (;;) {
        /* A server may close after any response; that is not this test's concern. */
        if (c.fd < 0 && e2e_conn_open(&c, g_daemon.port) != 0) {
            snprintf(w->error, sizeof w->error, "reconnect: %s", strerror(errno));
            break;
        }
        if (e2e_request(&c, "POST", claim, NULL, lease, strlen(lease), &r) != 0) {
            snprintf(w->error, sizeof w->error, "claim: no response");
            break;
        }
        if (r.status == 204) break;
        long long id = 0;
        const char *tok = r.json ? rd_json_string(rd_json_get(r.json, "lease_token")) : NULL;
        if (r.status != 200 || tok == NULL || !rd_json_integer(rd_json_get(r.json, "id"), &id) ||
            id < 1 || id > MESSAGES) {
            snprintf(w->error, sizeof w->error, "claim: %d %.200s", r.status, r.body);
            break;
        }
        atomic_fetch_add(&w->claims[id], 1);
        snprintf(token, sizeof token, "{\"lease_token\":\"%s\"}", tok);
        e2e_response_free(&r);
        char succeed[160];
        snprintf(succeed, sizeof succeed, "/queues/%s/messages/%lld/succeed", w->queue, id);
        const char *status = NULL;
        if (c.fd < 0) e2e_conn_open(&c, g_daemon.port);
        if (e2e_request(&c, "POST", succeed, NULL, token, strlen(token), &r) == 0 && r.json)
            status = rd_json_string(rd_json_get(r.json, "status"));
        if (r.status != 200 || status == NULL || strcmp(status, "succeeded") != 0) {
            snprintf(w->error, sizeof w->error, "succeed %lld: %d %.200s", id, r.status,
                     r.body ? r.body : "");
            break;
        }
        e2e_response_free(&r);
        w->done++;
    }
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return NULL;
}

static void test_concurrent_claims_claim_each_message_once(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "concurrent");
    for (int i = 1; i <= MESSAGES; i++)
        assert_int_equal(enqueue(q, e2e_fmt("{\"payload\":\"job %d\"}", i)), i);

    static atomic_int claims[MESSAGES + 1];
    for (int i = 0; i <= MESSAGES; i++) atomic_init(&claims[i], 0);
    worker_t workers[WORKERS];
    memset(workers, 0, sizeof workers);
    for (int i = 0; i < WORKERS; i++) {
        workers[i].queue = q;
        workers[i].claims = claims;
        assert_int_equal(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    }
    /* Join them all before asserting: a failed test must leave no thread. */
    for (int i = 0; i < WORKERS; i++) pthread_join(workers[i].thread, NULL);
    int done = 0;
    for (int i = 0; i < WORKERS; i++) {
        if (workers[i].error[0]) fail_msg("worker %d: %s", i, workers[i].error);
        done += workers[i].done;
    }
    assert_int_equal(done, MESSAGES);
    for (int id = 1; id <= MESSAGES; id++) {
        if (atomic_load(&claims[id]) != 1)
            fail_msg("message %d was claimed %d times", id, atomic_load(&claims[id]));
    }
    redisReply *z = e2e_rcmd(g_redis, "ZCARD %s:{%s}:3:succeeded", g_prefix, q);
    assert_int_equal(z->type, REDIS_REPLY_INTEGER);
    assert_int_equal(z->integer, MESSAGES);
    freeReplyObject(z);
    z = e2e_rcmd(g_redis, "LLEN %s:{%s}:3:ready", g_prefix, q);
    assert_int_equal(z->integer, 0);
    freeReplyObject(z);
}

/* ------------------------------------------------------------------------ */
/* Redis faults                                                             */
/* ------------------------------------------------------------------------ */

static void test_function_flush_is_recovered(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "flush");
    assert_int_equal(enqueue(q, "{\"payload\":\"before\"}"), 1);
    redisReply *x = e2e_rcmd(g_redis, "FUNCTION FLUSH SYNC");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);

    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
    expect_message(e2e_expect_json(&r, 201), 2, q, "pending", 0, 3);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "before");

    x = e2e_rcmd(g_redis, "FUNCTION LIST LIBRARYNAME " RD_LIBRARY_NAME);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 1);
    freeReplyObject(x);
    e2e_response_free(&r);
}

static void test_client_kill_is_recovered(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "kill");
    assert_int_equal(enqueue(q, "{\"payload\":\"before\"}"), 1);
    redisReply *x = e2e_rcmd(g_redis, "CLIENT KILL TYPE normal");
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    assert_true(x->integer >= 1);   /* at least the daemon's link */
    freeReplyObject(x);

    /* Meanwhile every answer is 503 (before the send, or unknown outcome). */
    e2e_response_t r = { 0 };
    long long deadline = e2e_mono_ms() + 10000;
    for (;;) {
        http(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
        if (r.status == 201) break;
        if (r.status != 503) fail_msg("expected 201 or 503, got %d: %s", r.status, r.body);
        if (strstr(r.body, "backend-unavailable"))
            e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        else e2e_expect_problem(&r, 503, "outcome-unknown", NULL);
        assert_true(r.retry_after[0] != '\0');
        if (e2e_mono_ms() > deadline) fail_msg("still 503 10 s after CLIENT KILL");
        e2e_pause_ms(20);
    }
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_true(e2e_jint(m, "id") >= 2);
    assert_int_equal(e2e_status_once(g_daemon.port, "GET", "/readyz"), 200);
    e2e_response_free(&r);
}

static void test_no_redis_is_503_and_keeps_running(void **state)
{
    (void)state;
    char prefix[80], url[64];
    snprintf(prefix, sizeof prefix, "%s-down", g_prefix);
    int dead_port = e2e_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dead_port);
    /* start_daemon's --redis is overridden by the later flag. */
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--redis", url, NULL), 0);
    e2e_response_t r = { 0 };

    char path[1024];
    SET(path, messages_path("down"));
    http_to(g_side.port, &r, "POST", path, "{\"payload\":\"x\"}", 15);
    e2e_expect_problem(&r, 503, "backend-unavailable", path);
    if (r.retry_after[0] == '\0' || atoi(r.retry_after) < 1)
        fail_msg("Retry-After \"%s\" is not a positive number of seconds", r.retry_after);

    http_to(g_side.port, &r, "POST", "/queues/down/claim", NULL, 0);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http_to(g_side.port, &r, "GET", "/queues/down/messages/1", NULL, 0);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http_to(g_side.port, &r, "GET", "/readyz", NULL, 0);
    assert_int_equal(r.status, 503);
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    e2e_expect_json(&r, 200);
    /* Validation needs no Redis. */
    http_to(g_side.port, &r, "POST", path, "{}", 2);
    expect_invalid(&r, path, 1);

    assert_true(e2e_daemon_alive(&g_side));
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Starts a private redis-server on port (no persistence) and waits until it
 * answers PING. Returns its pid, or -1. */
static pid_t start_redis(int port)
{
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        freopen("/dev/null", "w", stdout);
        execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    long long deadline = e2e_mono_ms() + READY_TIMEOUT_MS;
    while (e2e_mono_ms() < deadline) {
        if (e2e_redis_pong(port, 1000)) return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        e2e_pause_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Redis that was not there at start-up is picked up once it is (docs/reference.md "Daemon":
 * reconnect with backoff, 503 meanwhile). */
static void test_redis_started_later_is_picked_up(void **state)
{
    (void)state;
    char prefix[80], url[64];
    snprintf(prefix, sizeof prefix, "%s-late", g_prefix);
    int redis_port = e2e_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis_port);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--redis", url, NULL), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", "/queues/late/messages", "{\"payload\":\"x\"}", 15);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);

    g_side_redis = start_redis(redis_port);
    assert_true(g_side_redis > 0);
    long long started = e2e_mono_ms();
    for (;;) {
        http_to(g_side.port, &r, "POST", "/queues/late/messages", "{\"payload\":\"x\"}", 15);
        if (r.status == 201) break;
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        if (e2e_mono_ms() - started > 10000) fail_msg("still 503 10 s after Redis came up");
        e2e_pause_ms(50);
    }
    expect_message(e2e_expect_json(&r, 201), 1, "late", "pending", 0, 3);
    http_to(g_side.port, &r, "GET", "/readyz", NULL, 0);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    kill(g_side_redis, SIGTERM);
    waitpid(g_side_redis, NULL, 0);
    g_side_redis = 0;
}

/* The highest client id Redis has handed out so far. */
static long long redis_last_client_id(void)
{
    redisReply *x = e2e_rcmd(g_redis, "CLIENT ID");
    long long id = x->integer;
    freeReplyObject(x);
    return id;
}

/* SIGTERM to the test's own daemon; returns once its listener is closed
 * (then the signal has been handled). */
static void sigterm_side_daemon(void)
{
    assert_int_equal(kill(g_side.pid, SIGTERM), 0);
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        int fd = e2e_connect(g_side.port);
        if (fd < 0) break;
        close(fd);
        if (e2e_mono_ms() > deadline) fail_msg("still accepting 3 s after SIGTERM");
        e2e_pause_ms(10);
    }
}

static void test_shutdown_answers_in_flight_request(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-stop", g_prefix);
    long long last_client = redis_last_client_id();
    /* A long tick keeps this daemon's timer out of Redis during the test. */
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--tick-ms", "60000",
                                  NULL), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", "/queues/stop/messages", "{\"payload\":\"last\"}", 18);
    e2e_expect_json(&r, 201);

    /* Hold write commands in Redis so the claim is provably in flight. */
    redisReply *x = e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE");
    freeReplyObject(x);
    g_paused = true;
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_side.port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/stop/claim", NULL,
                                      "{\"lease_seconds\":5}", 19), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(last_client)) {
        if (e2e_mono_ms() > deadline) fail_msg("the claim never reached Redis");
        e2e_pause_ms(10);
    }

    sigterm_side_daemon();
    x = e2e_rcmd(g_redis, "CLIENT UNPAUSE");
    freeReplyObject(x);
    g_paused = false;

    e2e_response_t claimed = { 0 };
    if (e2e_read_response(&c, &claimed) != 0) fail_msg("the in-flight claim got no response");
    rd_json_t *m = e2e_expect_json(&claimed, 200);
    expect_message(m, 1, "stop", "processing", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "last");
    expect_lease(m, 5);
    e2e_response_free(&claimed);
    e2e_response_free(&r);
    e2e_conn_close(&c);
    e2e_conn_close(&g_conn);
    /* SIGTERM was sent above: only wait (the 5 s count from here is generous). */
    assert_int_equal(e2e_daemon_stop(&g_side, 0, E2E_STOP_TIMEOUT_MS), 0);
}

/* SIGTERM while settle-and-claim requests wait in their queue's line behind
 * a call in flight (docs/coalescing.md): every one is still carried out and
 * answered, then the daemon exits 0. */
static void test_shutdown_answers_settle_claims_in_line(void **state)
{
    (void)state;
    enum { K = 4 };
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-stopline", g_prefix);
    long long last_client = redis_last_client_id();
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--tick-ms", "60000",
                                  NULL), 0);
    e2e_response_t r = { 0 };
    for (int i = 0; i < K; i++) {
        http_to(g_side.port, &r, "POST", "/queues/line/messages", "{\"payload\":\"p\"}", 15);
        e2e_expect_json(&r, 201);
    }
    e2e_response_free(&r);

    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE"));
    g_paused = true;
    e2e_conn_t c[K];
    for (int i = 0; i < K; i++) {
        char body[128];
        SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"outcome\":\"succeeded\"}]}", 100 + i));
        assert_int_equal(e2e_conn_open(&c[i], g_side.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", "/queues/line/claim", NULL, body,
                                          strlen(body)), 0);
    }
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(last_client)) {
        if (e2e_mono_ms() > deadline) fail_msg("no call reached Redis");
        e2e_pause_ms(10);
    }
    /* An answer the daemon gives without Redis, asked after the requests
     * were sent: it has read them all by then. */
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    sigterm_side_daemon();
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT UNPAUSE"));
    g_paused = false;

    bool seen[K + 1] = { false };
    for (int i = 0; i < K; i++) {
        e2e_response_t a = { 0 };
        if (e2e_read_response(&c[i], &a) != 0) fail_msg("request %d got no response", i);
        const long long id = 100 + i;
        const char *status = "not-found";
        rd_json_t *messages = expect_settled(&a, 1, &id, &status);
        assert_int_equal(rd_json_array_size(messages), 1);
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, 1, K);
        assert_false(seen[got]);
        seen[got] = true;
        e2e_response_free(&a);
        e2e_conn_close(&c[i]);
    }
    assert_int_equal(e2e_daemon_stop(&g_side, 0, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* Memory a client can pin (issue 19 items 2 and 3)                         */
/* ------------------------------------------------------------------------ */

/* A raw connection whose receive timeout is ms (bounds every wait below). */
static int raw_connect(int port, int ms, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    /* Before connect, so the window the client offers stays that small. */
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Reads one response head and its Content-Length body from fd into buf
 * (NUL-terminated); returns its status, or -1 when none came in time. */
static int raw_response(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len + 1 >= cap) return -1;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strcasestr(buf, "\r\nContent-Length: ");
    size_t want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 18, NULL, 10) : 0);
    while (len < want && len + 1 < cap) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) return -1;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

/* The server ended the connection: EOF (or a reset) before the timeout. */
static void expect_closed(int fd)
{
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n > 0) fail_msg("more bytes after the refusal: %.*s", (int)n, b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        fail_msg("the connection was left open after the refusal");
}

/* Sends a request head on fd; with start_body, also the first 4 KiB of its
 * body (a client that does not wait for the answer to the head). */
static void send_head(int fd, const char *head, bool start_body)
{
    assert_int_equal(e2e_send_all(fd, head, strlen(head)), 0);
    if (start_body) {
        static char part[4096];
        memset(part, 'a', sizeof part);
        assert_int_equal(e2e_send_all(fd, part, sizeof part), 0);
    }
}

/* The answer on connection i (fd) must be want, read into buf. */
static void expect_answer(int fd, int i, int want, char *buf, size_t cap)
{
    int status = raw_response(fd, buf, cap);
    if (status != want)
        fail_msg("connection %d: expected %d before the body, got %d: %.300s", i, want, status,
                 status < 0 ? "(nothing in 3 s)" : buf);
}

/* A /metrics sample of port's daemon (the whole line's name, labels
 * included), asked with token when it is not NULL. */
static long long metric_as(int port, const char *token, const char *name)
{
    e2e_response_t r = { 0 };
    /* /metrics reads Redis: a daemon started without waiting for /readyz
     * answers 503 until its link is up (READY_TIMEOUT_MS at most). */
    long long deadline = e2e_mono_ms() + READY_TIMEOUT_MS;
    for (;;) {
        e2e_conn_t c;
        assert_int_equal(e2e_conn_open(&c, port), 0);
        assert_int_equal(e2e_request(&c, "GET", "/metrics",
                                     token ? e2e_fmt("Authorization: Bearer %s\r\n", token) : NULL,
                                     NULL, 0, &r), 0);
        e2e_conn_close(&c);
        if (r.status != 503 || e2e_mono_ms() >= deadline) break;
        e2e_response_free(&r);
        e2e_pause_ms(20);
    }
    if (r.status != 200) fail_msg("GET /metrics: %d %.300s", r.status, r.body ? r.body : "");
    const char *at = strstr(r.body, e2e_fmt("\n%s ", name));
    if (at == NULL) fail_msg("/metrics has no %s", name);
    long long v = strtoll(at + strlen(name) + 2, NULL, 10);
    e2e_response_free(&r);
    return v;
}

static long long metric_on(int port, const char *name)
{
    return metric_as(port, NULL, name);
}

static const char *write_token_file(const char *token)
{
    static char path[128];
    snprintf(path, sizeof path, "/tmp/retryd-e2e-token-%ld", (long)getpid());
    FILE *tf = fopen(path, "w");
    assert_non_null(tf);
    fprintf(tf, "%s\n", token);
    fclose(tf);
    return path;
}

/* With --auth-token-file, a request without the right token is answered 401
 * as soon as its headers are in: its body is never read (nor waited for),
 * 100-continue is not sent, and the connection is shut once the 401 is out.
 * An authorised request still gets 100 Continue and its 201. */
static void test_unauthorized_body_is_refused_unread(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-early", g_prefix);
    const char *file = write_token_file("s3cret-early-token");
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file", file,
                                  NULL), 0);
    unlink(file);
    char q[64];
    e2e_queue_name(q, sizeof q, "early");
    enum { N = 8 };
    int fds[N];
    static char buf[65536];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 0);
        /* Half ask for 100-continue; a quarter give a wrong token. */
        const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                                   "Content-Type: application/json\r\n"
                                   "Content-Length: 1048575\r\n%s%s\r\n",
                                   q, i % 2 ? "Expect: 100-continue\r\n" : "",
                                   i % 4 >= 2 ? "Authorization: Bearer wrong\r\n" : "");
        send_head(fds[i], head, i == 0);  /* one starts its body before the answer */
    }
    for (int i = 0; i < N; i++) {
        expect_answer(fds[i], i, 401, buf, sizeof buf);
        assert_non_null(strcasestr(buf, "\r\nConnection: close\r\n"));
        assert_non_null(strcasestr(buf, "\r\nWWW-Authenticate: Bearer realm=\"retryd\"\r\n"));
        assert_non_null(strstr(buf, "/problems/unauthorized"));
        expect_closed(fds[i]);
        close(fds[i]);
    }
    assert_true(metric_as(g_side.port, "s3cret-early-token",
                          "retryd_http_refused_total{reason=\"unauthorized\"}") >= N);

    /* The right token: 100 Continue, then the body is read and enqueued. */
    int fd = raw_connect(g_side.port, 3000, 0);
    const char *body = "{\"payload\":\"x\"}";
    const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                               "Expect: 100-continue\r\n"
                               "Authorization: Bearer s3cret-early-token\r\n\r\n",
                               q, strlen(body));
    assert_int_equal(e2e_send_all(fd, head, strlen(head)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 100);
    assert_int_equal(e2e_send_all(fd, body, strlen(body)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 201);
    close(fd);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* The SQS endpoint with --sqs-credentials: a request whose head fails the
 * signature check (none, an unknown access key) is answered in SQS's own
 * format as soon as its headers are in, before 100 Continue and before a
 * byte of its body is read, and the connection is shut: unsigned clients
 * cannot make the daemon hold their bodies (before, 200 such 1 MiB bodies
 * took its RSS from 12 MB to 213 MB until the idle timeout). */
static void test_sqs_unsigned_body_is_refused_unread(void **state)
{
    (void)state;
    char prefix[80], listen[32], creds[128];
    snprintf(prefix, sizeof prefix, "%s-sqsearly", g_prefix);
    int sqs_port = e2e_free_port();
    assert_true(sqs_port > 0);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", sqs_port);
    snprintf(creds, sizeof creds, "/tmp/retryd-e2e-sqs-creds-%ld", (long)getpid());
    FILE *cf = fopen(creds, "w");
    assert_non_null(cf);
    fprintf(cf, "AKIDEARLY s3cretEarlyKey\n");
    fclose(cf);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--sqs-listen", listen,
                                  "--sqs-credentials", creds, NULL), 0);
    unlink(creds);
    char amz_date[20];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);
    enum { N = 6 };
    int fds[N];
    static char buf[65536];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(sqs_port, 3000, 0);
        /* Half ask for 100-continue; half are signed by a key nobody has,
         * in the JSON protocol or the query one. */
        const char *auth = i % 4 >= 2
            ? e2e_fmt("X-Amz-Date: %s\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKIDNOBODY/"
                      "%.8s/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, "
                      "Signature=%064d\r\n", amz_date, amz_date, 0)
            : "";
        const char *type = i < 3 ? "Content-Type: application/x-amz-json-1.0\r\n"
                                   "X-Amz-Target: AmazonSQS.SendMessage\r\n"
                                 : "Content-Type: application/x-www-form-urlencoded\r\n";
        const char *head = e2e_fmt("POST / HTTP/1.1\r\nHost: t\r\n%sContent-Length: 1048575\r\n"
                                   "%s%s\r\n", type, i % 2 ? "Expect: 100-continue\r\n" : "",
                                   auth);
        send_head(fds[i], head, i == 0);
    }
    for (int i = 0; i < N; i++) {
        expect_answer(fds[i], i, 403, buf, sizeof buf);
        const char *code = i % 4 >= 2 ? "InvalidClientTokenId" : "MissingAuthenticationToken";
        if (strstr(buf, code) == NULL) fail_msg("connection %d: no %s in %.300s", i, code, buf);
        assert_non_null(strcasestr(buf, i < 3 ? "\r\nContent-Type: application/x-amz-json-1.0"
                                              : "\r\nContent-Type: text/xml"));
        assert_non_null(strcasestr(buf, "\r\nx-amzn-RequestId: "));
        expect_closed(fds[i]);
        close(fds[i]);
    }
    /* Bodiless and small requests are still answered by the full check. */
    int fd = raw_connect(sqs_port, 3000, 0);
    const char *list = "POST / HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-amz-json-1.0\r\n"
                       "X-Amz-Target: AmazonSQS.ListQueues\r\nContent-Length: 2\r\n\r\n{}";
    assert_int_equal(e2e_send_all(fd, list, strlen(list)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 403);
    assert_non_null(strstr(buf, "MissingAuthenticationToken"));
    close(fd);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* The public routes (/healthz, /openapi.json, /ui) take no body: without
 * the token a request with one is refused at its headers like any other, so
 * that GETs of /healthz with 1 MiB bodies cannot fill
 * --max-pending-body-bytes and make every authorised body get 503. */
static void test_public_route_body_needs_token(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-pubbody", g_prefix);
    const char *file = write_token_file("s3cret-pubbody-token");
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file", file,
                                  "--max-pending-body-bytes", "3000000", NULL), 0);
    unlink(file);
    static const char *paths[] = { "/healthz", "/openapi.json", "/ui/", "/healthz" };
    enum { N = 4 };
    int fds[N];
    static char buf[65536];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 0);
        const char *head = e2e_fmt("GET %s HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n%s\r\n",
                                   paths[i], i == 3 ? "Expect: 100-continue\r\n" : "");
        assert_int_equal(e2e_send_all(fds[i], head, strlen(head)), 0);
        memset(buf, 'a', 4096);
        if (i != 3) assert_int_equal(e2e_send_all(fds[i], buf, 4096), 0);
    }
    for (int i = 0; i < N; i++) {
        int status = raw_response(fds[i], buf, sizeof buf);
        if (status != 401)
            fail_msg("GET %s with a body and no token: expected 401 at the headers, got %d: %.200s",
                     paths[i], status, status < 0 ? "(nothing in 3 s)" : buf);
        assert_non_null(strstr(buf, "/problems/unauthorized"));
        expect_closed(fds[i]);
        close(fds[i]);
    }
    const char *tok = "s3cret-pubbody-token";
    assert_int_equal(metric_as(g_side.port, tok, "retryd_http_pending_body_bytes"), 0);
    /* Bodiless, they stay public; with the token a body is still read. */
    int fd = raw_connect(g_side.port, 3000, 0);
    const char *get = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(e2e_send_all(fd, get, strlen(get)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 200);
    const char *with = e2e_fmt("GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                               "Authorization: Bearer %s\r\n\r\nab", tok);
    assert_int_equal(e2e_send_all(fd, with, strlen(with)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 200);
    close(fd);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* --max-pending-body-bytes bounds the bodies being read at once: a body
 * that would pass it gets 503 (Retry-After) before it is read; once the
 * first body is in and answered, the next one is taken. */
static void test_pending_body_budget_is_503(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-bodies", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true,
                                  "--max-pending-body-bytes", "200000", NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "bodies");
    enum { BIG = 150000 };
    static char body[BIG + 1];
    memset(body, 'b', BIG);
    memcpy(body, "{\"payload\":\"", 12);
    memcpy(body + BIG - 2, "\"}", 2);
    static char buf[65536];

    int a = raw_connect(g_side.port, 3000, 0);
    const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                               "Content-Length: %d\r\n\r\n", q, BIG);
    assert_int_equal(e2e_send_all(a, head, strlen(head)), 0);
    assert_int_equal(e2e_send_all(a, body, 1000), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (metric_on(g_side.port, "retryd_http_pending_body_bytes") < BIG) {
        if (e2e_mono_ms() > deadline) fail_msg("the first body was never counted");
        e2e_pause_ms(10);
    }

    int b = raw_connect(g_side.port, 3000, 0);
    const char *head_b = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Length: 100000\r\nExpect: 100-continue\r\n\r\n", q);
    assert_int_equal(e2e_send_all(b, head_b, strlen(head_b)), 0);
    int status = raw_response(b, buf, sizeof buf);
    if (status != 503) fail_msg("expected 503 past the budget, got %d: %.200s", status, buf);
    assert_non_null(strcasestr(buf, "\r\nRetry-After: 1\r\n"));
    assert_non_null(strstr(buf, "max-pending-body-bytes"));
    expect_closed(b);
    close(b);
    assert_int_equal(metric_on(g_side.port, "retryd_http_refused_total{reason=\"body_budget\"}"),
                     1);

    /* The first body goes on and is enqueued; its bytes are released. */
    assert_int_equal(e2e_send_all(a, body + 1000, BIG - 1000), 0);
    assert_int_equal(raw_response(a, buf, sizeof buf), 201);
    close(a);
    assert_int_equal(metric_on(g_side.port, "retryd_http_pending_body_bytes"), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", messages_path(q), body, BIG);
    e2e_expect_json(&r, 201);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Enqueues n messages to q of prefix whose payload is len bytes of 0x01,
 * each written by JSON as "\u0001" (6 bytes), straight through the
 * library (the API takes at most --max-body of escaped JSON). */
static void enqueue_escaped(const char *prefix, const char *q, int n, size_t len)
{
    char *payload = malloc(len);
    assert_non_null(payload);
    memset(payload, 0x01, len);
    const char *base = e2e_fmt("%s:{%s}", prefix, q);
    for (int i = 0; i < n; i++) {
        redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 3 0 %s",
                                 base, payload, len, "");
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        freeReplyObject(x);
    }
    free(payload);
}

/* Enqueues n messages to q of prefix whose payload is len bytes of unit
 * repeated (cut at len). */
static void enqueue_text(const char *prefix, const char *q, int n, const char *unit, size_t len)
{
    char *payload = malloc(len);
    assert_non_null(payload);
    size_t u = strlen(unit);
    for (size_t i = 0; i < len; i++) payload[i] = unit[i % u];
    const char *base = e2e_fmt("%s:{%s}", prefix, q);
    for (int i = 0; i < n; i++) {
        redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 3 0 %s",
                                 base, payload, len, "");
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        freeReplyObject(x);
    }
    free(payload);
}

#define WIRE_BUDGET (4 * 1024 * 1024)
#define WIRE_SLACK (64 * 1024)     /* the answer's own framing and fixed fields */

/* The 4 MiB reply budget counts bytes as JSON writes them: a page or a batch
 * claim of payloads that escape six-fold stays under about 4 MiB, and always
 * carries one message, even one alone past it. */
static void test_reply_budget_counts_escaped_bytes(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "escaped");
    enum { N_MSG = 12, PAYLOAD = 400 * 1024 };   /* 2.4 MiB each on the wire */
    enqueue_escaped(g_prefix, q, N_MSG, PAYLOAD);
    e2e_response_t r = { 0 };

    size_t seen = 0;
    char cursor[256] = "";
    for (int page = 0; page < 3 * N_MSG; page++) {
        http(&r, "GET", e2e_fmt("%s?limit=100%s%s", messages_path(q), cursor[0] ? "&cursor=" : "",
                                e2e_url_encode(cursor)), NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        size_t got = rd_json_array_size(e2e_jget(doc, "messages"));
        if (r.body_len > WIRE_BUDGET + WIRE_SLACK)
            fail_msg("a page of %zu messages is %zu bytes", got, r.body_len);
        assert_true(got >= 1 || rd_json_is_null(e2e_jget(doc, "next_cursor")));
        seen += got;
        rd_json_t *next = e2e_jget(doc, "next_cursor");
        if (rd_json_is_null(next)) break;
        SET(cursor, rd_json_string(next));
    }
    assert_int_equal(seen, N_MSG);

    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=100", q), NULL);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    size_t got = rd_json_array_size(e2e_jget(doc, "messages"));
    if (r.body_len > WIRE_BUDGET + WIRE_SLACK)
        fail_msg("a claim of %zu messages is %zu bytes", got, r.body_len);
    assert_int_equal(got, 1);

    /* The budget is no tighter than the wire: 100 payloads of 40000 bytes of
     * plain text all fit one page; of JSON text (4 of its
     * 10 bytes quotes, written \") only as many as 4 MiB of output holds. */
    char plain[64], quoted[64];
    e2e_queue_name(plain, sizeof plain, "escaped-plain");
    e2e_queue_name(quoted, sizeof quoted, "escaped-quoted");
    enqueue_text(g_prefix, plain, 100, "plain text, ", 40000);
    enqueue_text(g_prefix, quoted, 100, "{\"a\":\"b\"},", 40000);
    http(&r, "GET", e2e_fmt("%s?limit=100", messages_path(plain)), NULL);
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 100);
    http(&r, "GET", e2e_fmt("%s?limit=100", messages_path(quoted)), NULL);
    got = rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
    if (r.body_len > WIRE_BUDGET + WIRE_SLACK || got < 60)
        fail_msg("a page of %zu quoted messages is %zu bytes", got, r.body_len);

    /* One message alone over the budget still comes, one per claim. */
    char big[64];
    e2e_queue_name(big, sizeof big, "escaped-big");
    enqueue_escaped(g_prefix, big, 2, 1024 * 1024);
    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=100", big), NULL);
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 1);
    e2e_response_free(&r);
}

/* A counter of q's stats hash under prefix, 0 when never counted. */
static long long queue_counter_of(const char *prefix, const char *q, const char *name)
{
    redisReply *x = e2e_rcmd(g_redis, "HGET %s:{%s}:stats %s", prefix, q, name);
    long long n = x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;
    freeReplyObject(x);
    return n;
}

/* Whole messages of q a reading client claims until none is left. */
static size_t claim_all(int port, const char *q)
{
    size_t n = 0;
    e2e_response_t r = { 0 };
    for (;;) {
        http_to(port, &r, "POST", e2e_fmt("/queues/%s/claim?count=100", q), NULL, 0);
        if (r.status == 204) break;
        n += rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
    }
    e2e_response_free(&r);
    return n;
}

/* Clients that claim and never read: past --max-pending-output-bytes of
 * answers queued in the daemon, the ones with the most unread are closed
 * (counted in /metrics), and their claims are handed back, released rather
 * than failed, and claimed again by a client that reads. */
static void test_slow_readers_closed_and_claims_handed_back(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-slow", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true,
                                  "--max-pending-output-bytes", "16777216", NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "slow");
    /* One message per claim, 6 MiB on the wire: more than the kernel's
     * socket buffers take (tcp_wmem's 4 MiB at most), so most of each
     * answer waits in the daemon for a reader that never comes. */
    enum { N_MSG = 8, READERS = 6, PAYLOAD = 1024 * 1024 };
    enqueue_escaped(prefix, q, N_MSG, PAYLOAD);

    int fds[READERS];
    const char *req = e2e_fmt("POST /queues/%s/claim?count=100 HTTP/1.1\r\nHost: t\r\n"
                              "Content-Length: 0\r\n\r\n", q);
    for (int i = 0; i < READERS; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 4096);
        assert_int_equal(e2e_send_all(fds[i], req, strlen(req)), 0);
    }
    long long deadline = e2e_mono_ms() + 5000;
    while (queue_counter_of(prefix, q, "claimed") < READERS) {
        if (e2e_mono_ms() > deadline) fail_msg("the readers' claims did not all run");
        e2e_pause_ms(20);
    }
    /* /metrics asks Redis on the link the claims' answers came back on, so
     * it is answered after every claim was: the count is final. */
    long long closed = metric_on(g_side.port, "retryd_http_slow_readers_closed_total");
    assert_true(closed >= 1);
    /* Every closed reader's message comes back: released, never failed. */
    while (queue_counter_of(prefix, q, "released") < closed) {
        if (e2e_mono_ms() > deadline) fail_msg("the closed readers' claims were not handed back");
        e2e_pause_ms(20);
    }
    assert_int_equal(queue_counter_of(prefix, q, "released"), closed);
    assert_int_equal(queue_counter_of(prefix, q, "failed"), 0);
    assert_true(closed < READERS);   /* the rest fit under the bound */
    assert_true(metric_on(g_side.port, "retryd_http_pending_output_bytes") <= 16777216);
    /* A reader's answers count too: while it claims the rest, one more of
     * the readers that never read may be closed, and its message claimed. */
    size_t again = claim_all(g_side.port, q);
    closed = metric_on(g_side.port, "retryd_http_slow_readers_closed_total");
    assert_int_equal(again, N_MSG - READERS + (size_t)closed);
    assert_int_equal(queue_counter_of(prefix, q, "released"), closed);
    assert_int_equal(queue_counter_of(prefix, q, "failed"), 0);
    for (int i = 0; i < READERS; i++) close(fds[i]);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_keep_alive_50_requests),
        T(test_pipelined_requests_answered_in_order),
        T(test_concurrent_claims_claim_each_message_once),
        T(test_function_flush_is_recovered),
        T(test_client_kill_is_recovered),
        T(test_no_redis_is_503_and_keeps_running),
        T(test_redis_started_later_is_picked_up),
        T(test_shutdown_answers_in_flight_request),
        T(test_shutdown_answers_settle_claims_in_line),
        T(test_unauthorized_body_is_refused_unread),
        T(test_sqs_unsigned_body_is_refused_unread),
        T(test_public_route_body_needs_token),
        T(test_pending_body_budget_is_503),
        T(test_reply_budget_counts_escaped_bytes),
        T(test_slow_readers_closed_and_claims_handed_back),
    };
    int failed = cmocka_run_group_tests_name("e2e_links", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
