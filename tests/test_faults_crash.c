/* test_faults_crash.c - fault injection against the real build/retryd: a retryd killed -9 while it holds leases, shutdown
 * with requests in flight, half-closed and reset clients, lost hand-backs,
 * replay and redrive cut part way, and a valgrind run ending in a graceful
 * shutdown.
 *
 * The group setup, daemons and the helpers the fault suites share:
 * faults_common.h. */

#define FAULTS_SUITE "test_faults_crash"
#include "faults_common.h"

/* ========================================================================= */
/* 5. Crash of retryd                                                        */
/* ========================================================================= */

static void test_kill9_retryd_leases_come_back(void **state)
{
    (void)state;
    enum { N = 20 };
    char prefix[128];
    PREFIX(prefix, "crash");
    char pfx[128];
    SET(pfx, prefix);
    assert_int_equal(start_retryd(&g_dmn[0], "crash-a.log", e2e_redis_url(g_shared_port), pfx, true,
                                  "--lease-seconds", "2", NULL), 0);
    int port_a = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 1; i <= N; i++) {
        http(port_a, &r, "POST", "/queues/c/messages", e2e_fmt("{\"payload\":\"job %d\"}", i));
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    char tokens[N + 1][96];
    for (int i = 1; i <= N; i++) {
        http(port_a, &r, "POST", "/queues/c/claim", NULL);
        rd_json_t *msg = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(msg, "id"), i);
        SET(tokens[i], e2e_jstr(msg, "lease_token"));
    }
    long long last_claim = e2e_mono_ms();
    /* A worker long-polling on A when it dies sees its connection end. */
    e2e_conn_t waiting;
    assert_int_equal(e2e_conn_open(&waiting, port_a), 0);
    assert_int_equal(e2e_send_request(&waiting, "POST", "/queues/c-idle/claim", NULL,
                                      "{\"wait_seconds\":10}", 19), 0);
    assert_int_equal(rq_int(g_shared, "ZCARD %s:{c}:3:processing", pfx), N);
    e2e_conn_close(&g_conn);

    assert_int_equal(e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS), 256 + SIGKILL);
    long long killed_at = e2e_mono_ms();
    assert_true(fx_wait_closed(waiting.fd, 2000) >= 0);
    e2e_conn_close(&waiting);
    assert_int_equal(start_retryd(&g_dmn[1], "crash-b.log", e2e_redis_url(g_shared_port), pfx, true,
                                  NULL), 0);
    int port_b = g_dmn[1].port;

    /* The leases expire and B's timer gives the messages back. */
    long long back_ms = -1;
    while (back_ms < 0) {
        size_t count;
        stored_t *m = load_messages(g_shared, pfx, "c", &count);
        int pending = 0;
        for (size_t i = 0; i < count; i++)
            pending += strcmp(m[i].status, "pending") == 0 &&
                       strcmp(m[i].last_error, "lease expired") == 0 && m[i].retry_count == 1;
        stored_free(m, count);
        assert_int_equal(count, N);
        if (pending == N) back_ms = e2e_mono_ms() - last_claim;
        else if (e2e_mono_ms() - last_claim > 2000 + TICK_MS + 2000)
            fail_msg("%d of %d leased messages pending again 4 s after their 2 s leases", pending,
                     N);
        else e2e_pause_ms(20);
    }
    assert_int_equal(rq_int(g_shared, "ZCARD %s:{c}:3:processing", pfx), 0);
    /* A zombie worker of A cannot settle what came back. */
    http(port_b, &r, "POST", "/queues/c/messages/1/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", tokens[1]));
    assert_int_equal(r.status, 409);

    /* B hands every one of them out again (after the 2 s retry backoff). */
    bool got[N + 1] = { false };
    int claimed = 0;
    long long deadline = e2e_mono_ms() + 6000;
    while (claimed < N) {
        http(port_b, &r, "POST", "/queues/c/claim", "{\"lease_seconds\":60}");
        if (r.status == 204) {
            if (e2e_mono_ms() > deadline) fail_msg("B claimed only %d of %d in time", claimed, N);
            e2e_pause_ms(50);
            continue;
        }
        rd_json_t *msg = e2e_expect_json(&r, 200);
        long long id = e2e_jint(msg, "id");
        assert_true(id >= 1 && id <= N && !got[id]);
        assert_int_equal(e2e_jint(msg, "retry_count"), 1);
        got[id] = true;
        claimed++;
        http(port_b, &r, "POST", e2e_fmt("/queues/c/messages/%lld/succeed", id), NULL);
        e2e_expect_json(&r, 200);
    }
    printf("# measured kill -9 retryd: %d leased messages pending again %lld ms after the last "
           "claim (lease 2 s), all claimed again through a new retryd %lld ms after the kill\n",
           N, back_ms, e2e_mono_ms() - killed_at);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[1]);

    /* Nothing lost, nothing extra. */
    size_t count;
    stored_t *m = load_messages(g_shared, pfx, "c", &count);
    assert_int_equal(count, N);
    for (size_t i = 0; i < count; i++) {
        assert_int_equal(m[i].id, (long long)i + 1);
        assert_string_equal(m[i].status, "succeeded");
        assert_string_equal(m[i].payload, e2e_fmt("job %zu", i + 1));
    }
    assert_int_equal(rq_int(g_shared, "GET %s:{c}:seq", pfx), N);
    expect_indexes_consistent(g_shared, pfx, "c", m, count);
    stored_free(m, count);
}

/* kill -9 retryd in the middle of a mixed load: every 201 survives, the
 * leases it held come back, a new retryd carries on. */
static void test_kill9_retryd_under_load(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "crashload");
    assert_int_equal(start_retryd(&g_dmn[0], "crashload-a.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    static atomic_bool stop;
    atomic_store(&stop, false);
    loader_t w[LOADERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < LOADERS; i++) {
        w[i].idx = i;
        w[i].port = g_dmn[0].port;
        w[i].q = "cl";
        w[i].stop = &stop;
        w[i].lease_seconds = 2;
        w[i].leave_every = 4;
        w[i].until_gone = true;
        atomic_init(&w[i].created, 0);
        atomic_init(&w[i].failed503, 0);
        atomic_init(&w[i].gone, false);
        assert_int_equal(pthread_create(&w[i].thread, NULL, loader_main, &w[i]), 0);
    }
    long long t0 = e2e_mono_ms();
    while (e2e_mono_ms() - t0 < 700 && sum_created(w) < 100000) e2e_pause_ms(10);
    int status = e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS);
    long long killed_at = e2e_mono_ms();
    /* Every loader notices (its connection ends) within a bound. */
    bool all_gone = false;
    while (!all_gone && e2e_mono_ms() - killed_at < 5000) {
        all_gone = true;
        for (int i = 0; i < LOADERS; i++) all_gone = all_gone && atomic_load(&w[i].gone);
        if (!all_gone) e2e_pause_ms(10);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < LOADERS; i++) pthread_join(w[i].thread, NULL);
    for (int i = 0; i < LOADERS; i++) if (w[i].error[0]) fail_msg("loader %d: %s", i, w[i].error);
    assert_int_equal(status, 256 + SIGKILL);
    assert_true(all_gone);
    int created = sum_created(w);
    assert_true(created >= 20);

    /* What A had leased when it died. */
    redisReply *x = e2e_rcmd(g_shared, "ZRANGE %s:{cl}:3:processing 0 -1", pfx);
    size_t leased = x->elements;
    long long *ids = calloc(leased ? leased : 1, sizeof *ids);
    for (size_t i = 0; i < leased; i++) ids[i] = atoll(x->element[i]->str);
    freeReplyObject(x);

    assert_int_equal(start_retryd(&g_dmn[1], "crashload-b.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    /* Within the 2 s lease (+ a tick, + margin) B's timer gives them back. */
    long long back_ms = -1;
    while (back_ms < 0) {
        if (rq_int(g_shared, "ZCARD %s:{cl}:3:processing", pfx) == 0)
            back_ms = e2e_mono_ms() - killed_at;
        else if (e2e_mono_ms() - killed_at > 2000 + TICK_MS + 2000)
            fail_msg("leases of the killed retryd still held 4 s after the kill");
        else e2e_pause_ms(20);
    }
    for (size_t i = 0; i < leased; i++) {
        char cur[32], error[64];
        const char *base = e2e_fmt("%s:{cl}", pfx);
        e2e_message_field(g_shared, base, ids[i], "status", cur, sizeof cur);
        e2e_message_field(g_shared, base, ids[i], "last_error", error, sizeof error);
        bool back = (strcmp(cur, "pending") == 0 || strcmp(cur, "dead") == 0) &&
                    strcmp(error, "lease expired") == 0;
        if (!back) fail_msg("message %lld, leased by the killed retryd, did not come back", ids[i]);
    }
    free(ids);
    assert_true(leased >= 1);
    /* B carries on. */
    e2e_response_t r = { 0 };
    http(g_dmn[1].port, &r, "POST", "/queues/cl/messages", "{\"payload\":\"after the crash\"}");
    long long after_id = e2e_jint(e2e_expect_json(&r, 201), "id");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[1]);

    sent_log_t all = { 0 };
    for (int i = 0; i < LOADERS; i++)
        for (size_t j = 0; j < w[i].log.n; j++) *sent_add(&all) = w[i].log.items[j];
    sent_t *last = sent_add(&all);
    SET(last->payload, "after the crash");
    last->outcome = OUT_CREATED;
    last->id = after_id;
    size_t count;
    stored_t *m = load_messages(g_shared, pfx, "cl", &count);
    expect_enqueues_accounted(&all, m, count, "kill -9 retryd under load");
    expect_indexes_consistent(g_shared, pfx, "cl", m, count);
    printf("# measured kill -9 retryd under load: %d x 201 through the killed retryd, %zu "
           "leases held by it, all given back %lld ms after the kill (lease 2 s)\n", created,
           leased, back_ms);
    stored_free(m, count);
    free(all.items);
    for (int i = 0; i < LOADERS; i++) {
        free(w[i].log.items);
        free(w[i].acked);
    }
}

/* ========================================================================= */
/* 5. Shutdown with requests in flight; half-closed and reset clients        */
/* ========================================================================= */

/* Bytes the kernel holds unread on the daemon's end of the connection from
 * client_port (/proc/net/tcp rx_queue), or -1 when there is no such socket. */
static long server_unread_bytes(int daemon_port, int client_port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) return -1;
    char line[512], local[32], remote[32];
    snprintf(local, sizeof local, "0100007F:%04X", daemon_port);
    snprintf(remote, sizeof remote, "0100007F:%04X", client_port);
    long unread = -1;
    while (fgets(line, sizeof line, f)) {
        char l[64], r[64];
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %63s %63s %*x %lx:%lx", l, r, &tx, &rx) != 4) continue;
        if (strcmp(l, local) == 0 && strcmp(r, remote) == 0) {
            unread = (long)rx;
            break;
        }
    }
    fclose(f);
    return unread;
}

/* The local port of a connected socket, or -1. */
static int local_port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) return -1;
    return ntohs(a.sin_port);
}

enum inflight_kind { IF_LONG_POLL, IF_ENQUEUE, IF_LIST, IF_GET, IF_CLAIM, IF_KINDS };

static const char *const inflight_names[IF_KINDS] = { "long-poll", "enqueue", "list", "get",
                                                      "claim" };

/* One client of the shutdown test: one request on a connection of its own. */
typedef struct inflight {
    pthread_t thread;
    enum inflight_kind kind;
    int port;
    const char *method;
    char path[160];
    char *body;                   /* rd_malloc'd or NULL */
    size_t body_len;
    atomic_int client_port;       /* 0 until the request is sent; -1 when that failed */
    atomic_bool done;             /* the response (or the lack of one) is in */
    int rc;                       /* 0: a complete response came */
    e2e_response_t r;
} inflight_t;

static void *inflight_main(void *arg)
{
    inflight_t *f = arg;
    e2e_conn_t c;
    f->rc = -1;
    if (e2e_conn_open(&c, f->port) != 0 ||
        e2e_send_request(&c, f->method, f->path, NULL, f->body, f->body_len) != 0) {
        atomic_store(&f->client_port, -1);
        e2e_conn_close(&c);
        return NULL;
    }
    atomic_store(&f->client_port, local_port_of(c.fd));
    f->rc = e2e_read_response(&c, &f->r);
    e2e_conn_close(&c);
    atomic_store(&f->done, true);
    return NULL;
}

/* ~20 clients of every kind have requests in flight (the writes provably
 * held in Redis) when SIGTERM comes: retryd exits 0, every client gets a
 * complete response (or a complete 503 problem), and Redis agrees with what
 * the clients were told: nothing is left processing that no client got. */
static void test_sigterm_with_requests_in_flight(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "term";
    /* The pause below must not look like a hung Redis. */
    assert_int_equal(start_retryd(&g_dmn[0], "term.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "20000", NULL), 0);
    int port = g_dmn[0].port;
    enum { SEEDED = 150, PAYLOAD_BYTES = 2048, PER_KIND = 4, CLIENTS = PER_KIND * IF_KINDS };
    char *payload = malloc(PAYLOAD_BYTES + 1);
    e2e_response_t r = { 0 };
    for (int i = 1; i <= SEEDED; i++) {
        char tag[32];
        int n = snprintf(tag, sizeof tag, "seed %d ", i);
        memset(payload, 'a' + i % 26, PAYLOAD_BYTES);
        memcpy(payload, tag, (size_t)n);
        payload[PAYLOAD_BYTES] = '\0';
        size_t len;
        char *body = e2e_json_with_string("payload", payload, &len);
        e2e_http_on(&g_conn, port, &r, "POST", "/queues/work/messages", NULL, body, len);
        rd_free(body);
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    static inflight_t f[CLIENTS];
    memset(f, 0, sizeof f);
    for (int i = 0; i < CLIENTS; i++) {
        inflight_t *x = &f[i];
        x->kind = (enum inflight_kind)(i / PER_KIND);
        x->port = port;
        atomic_init(&x->client_port, 0);
        atomic_init(&x->done, false);
        switch (x->kind) {
        case IF_LONG_POLL:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/idle%d/claim", i);
            x->body = rd_strdup("{\"wait_seconds\":10}");
            break;
        case IF_ENQUEUE:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/work/messages");
            char tag[32];
            int n = snprintf(tag, sizeof tag, "late %d ", i);
            memset(payload, 'z', PAYLOAD_BYTES);
            memcpy(payload, tag, (size_t)n);
            payload[PAYLOAD_BYTES] = '\0';
            x->body = e2e_json_with_string("payload", payload, &x->body_len);
            break;
        case IF_LIST:
            x->method = "GET";
            snprintf(x->path, sizeof x->path, "/queues/work/messages?limit=100");
            break;
        case IF_GET:
            x->method = "GET";
            snprintf(x->path, sizeof x->path, "/queues/work/messages/%d", i);
            break;
        default:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/work/claim");
            x->body = rd_strdup("{\"count\":3,\"lease_seconds\":60}");
            break;
        }
        if (x->body && x->body_len == 0) x->body_len = strlen(x->body);
    }
    free(payload);

    /* The long-polls park first (each on a queue of its own). */
    for (int i = 0; i < PER_KIND; i++)
        assert_int_equal(pthread_create(&f[i].thread, NULL, inflight_main, &f[i]), 0);
    long long deadline = e2e_mono_ms() + 5000;
    for (int i = 0; i < PER_KIND; i++) {
        while (!wake_subscribed(g_admin, prefix, e2e_fmt("idle%d", i))) {
            if (e2e_mono_ms() > deadline) fail_msg("long-poll %d never parked", i);
            e2e_pause_ms(10);
        }
    }
    /* Writes are held in Redis from here on, and everything the daemon sends
     * after the first held write waits behind it on the same link. */
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE 20000 WRITE");
    freeReplyObject(x);
    for (int i = PER_KIND; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&f[i].thread, NULL, inflight_main, &f[i]), 0);
    /* Every request has reached the daemon (nothing unread on its end) and
     * at least one write is held in Redis. */
    deadline = e2e_mono_ms() + 5000;
    for (int i = 0; i < CLIENTS; i++) {
        for (;;) {
            int cp = atomic_load(&f[i].client_port);
            if (cp < 0) fail_msg("client %d (%s) could not send", i, inflight_names[f[i].kind]);
            if (atomic_load(&f[i].done) || (cp > 0 && server_unread_bytes(port, cp) == 0))
                break;
            if (e2e_mono_ms() > deadline)
                fail_msg("client %d (%s): its request was not read by the daemon", i,
                         inflight_names[f[i].kind]);
            e2e_pause_ms(5);
        }
    }
    for (;;) {
        x = e2e_rcmd(g_admin, "INFO clients");
        bool held = strstr(x->str, "blocked_clients:0\r") == NULL;
        freeReplyObject(x);
        if (held) break;
        if (e2e_mono_ms() > deadline) fail_msg("no write of the daemon is held in Redis");
        e2e_pause_ms(5);
    }

    assert_int_equal(kill(g_dmn[0].pid, SIGTERM), 0);
    /* Once the listener is closed the signal has been handled. */
    deadline = e2e_mono_ms() + 3000;
    for (;;) {
        int fd = e2e_connect(port);
        if (fd < 0) break;
        close(fd);
        if (e2e_mono_ms() > deadline) fail_msg("still accepting 3 s after SIGTERM");
        e2e_pause_ms(5);
    }
    x = e2e_rcmd(g_admin, "CLIENT UNPAUSE");
    freeReplyObject(x);
    for (int i = 0; i < CLIENTS; i++) pthread_join(f[i].thread, NULL);
    int status = e2e_daemon_stop(&g_dmn[0], 0, E2E_STOP_TIMEOUT_MS);

    /* What the clients were told. */
    long long *claimed = calloc(CLIENTS * 3, sizeof *claimed);
    size_t nclaimed = 0;
    int tally[IF_KINDS][3] = { { 0 } };   /* success, 503, none */
    for (int i = 0; i < CLIENTS; i++) {
        inflight_t *c = &f[i];
        const char *kind = inflight_names[c->kind];
        if (c->rc != 0) {
            tally[c->kind][2]++;
            continue;
        }
        if (c->r.status == 503) {
            expect_503(&c->r);
            tally[c->kind][1]++;
            continue;
        }
        tally[c->kind][0]++;
        switch (c->kind) {
        case IF_LONG_POLL:
            if (c->r.status != 204) fail_msg("%s %d: %d %s", kind, i, c->r.status, c->r.body);
            break;
        case IF_ENQUEUE:
            e2e_jint(e2e_expect_json(&c->r, 201), "id");
            break;
        case IF_LIST: {
            rd_json_t *list = e2e_jget(e2e_expect_json(&c->r, 200), "messages");
            assert_int_equal(rd_json_array_size(list), 100);
            break;
        }
        case IF_GET:
            assert_int_equal(e2e_jint(e2e_expect_json(&c->r, 200), "id"), i);
            break;
        default: {
            rd_json_t *list = e2e_jget(e2e_expect_json(&c->r, 200), "messages");
            for (size_t j = 0; j < rd_json_array_size(list); j++)
                claimed[nclaimed++] = e2e_jint(rd_json_array_at(list, j), "id");
            break;
        }
        }
    }
    printf("# measured SIGTERM with %d requests in flight: exit status %d; answered "
           "(ok/503/none): long-poll %d/%d/%d, enqueue %d/%d/%d, list %d/%d/%d, get %d/%d/%d, "
           "claim %d/%d/%d; %zu messages claimed\n", CLIENTS, status,
           tally[0][0], tally[0][1], tally[0][2], tally[1][0], tally[1][1], tally[1][2],
           tally[2][0], tally[2][1], tally[2][2], tally[3][0], tally[3][1], tally[3][2],
           tally[4][0], tally[4][1], tally[4][2], nclaimed);
    if (status != 0)
        fail_msg("retryd after SIGTERM with requests in flight: %s %d",
                 status < 0 ? "killed," : status > 255 ? "signal" : "exit",
                 status > 255 ? status - 256 : status);
    for (int k = 0; k < IF_KINDS; k++)
        if (tally[k][2] > 0)
            fail_msg("%d %s client(s) got no complete response", tally[k][2], inflight_names[k]);

    /* What Redis holds agrees: a message is processing iff a client got it. */
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "work", &count);
    for (size_t i = 0; i < count; i++) {
        bool given = false;
        for (size_t j = 0; j < nclaimed; j++) given = given || claimed[j] == m[i].id;
        if (strcmp(m[i].status, "processing") == 0 && !given)
            fail_msg("message %lld is processing but no client received it", m[i].id);
        if (given && strcmp(m[i].status, "processing") != 0)
            fail_msg("message %lld was handed to a client but is %s", m[i].id, m[i].status);
    }
    for (int i = 0; i < CLIENTS; i++) {
        if (f[i].kind != IF_ENQUEUE || f[i].rc != 0 || f[i].r.status != 201) continue;
        long long id = e2e_jint(f[i].r.json, "id");
        const stored_t *s = find_id(m, count, id);
        if (s == NULL) fail_msg("enqueue %d got 201 (id %lld) but is not in Redis", i, id);
    }
    expect_indexes_consistent(g_admin, prefix, "work", m, count);
    stored_free(m, count);
    free(claimed);
    for (int i = 0; i < CLIENTS; i++) {
        e2e_response_free(&f[i].r);
        rd_free(f[i].body);
    }
}

/* Sends one request on a fresh connection, then shutdown(SHUT_WR) as HTTP/1.1
 * allows, and reads the answer. */
static void half_closed_request(int port, const char *method, const char *path, const char *body,
                                e2e_response_t *r)
{
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, method, path, NULL, body, body ? strlen(body) : 0), 0);
    assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
    e2e_response_free(r);
    if (e2e_read_response(&c, r) != 0)
        fail_msg("%s %s then SHUT_WR: no complete response", method, path);
    /* Then the server ends the connection. */
    if (c.fd >= 0 && fx_wait_closed(c.fd, 3000) < 0)
        fail_msg("%s %s then SHUT_WR: still open 3 s after the answer", method, path);
    e2e_conn_close(&c);
}

/* A client that half-closes after its request gets the answer: the enqueue
 * its 201 (no duplicate when it would have retried), the claim its message
 * (not left processing until the lease runs out). */
static void test_half_closed_clients_get_their_answers(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "halfclose");
    assert_int_equal(start_retryd(&g_dmn[0], "halfclose.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    half_closed_request(port, "POST", "/queues/hc/messages",
                        "{\"payload\":\"sent once\",\"max_retries\":1}", &r);
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "sent once");

    half_closed_request(port, "POST", "/queues/hc/claim", "{\"lease_seconds\":30}", &r);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    const char *token = e2e_jstr(m, "lease_token");
    char field[160];
    const char *base = e2e_fmt("%s:{hc}", pfx);
    assert_string_equal(e2e_message_field(g_shared, base, 1, "status", field, sizeof field),
                        "processing");
    assert_string_equal(e2e_message_field(g_shared, base, 1, "lease_token", field, sizeof field),
                        token);

    /* The worker that got it can settle it. */
    half_closed_request(port, "POST", "/queues/hc/messages/1/succeed",
                        e2e_fmt("{\"lease_token\":\"%s\"}", token), &r);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
    assert_int_equal(rq_int(g_shared, "GET %s:{hc}:seq", pfx), 1);
}

/* Client X pipelines two long-poll claims and half-closes; client Y then
 * long-polls the same queue. Answering X's first waiter (its client has
 * closed its side) runs X's second request at once, which parks and serves
 * the queue from inside the first serve: the claim for Y must be sent once.
 * Before the fix it went out twice and the second answer found no waiter
 * (NULL dereference: the daemon crashed). */
static void test_pipelined_long_polls_after_half_close(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "pipehalf");
    assert_int_equal(start_retryd(&g_dmn[0], "pipehalf.log", e2e_redis_url(g_shared_port), pfx,
                                  true, "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    const char *body = "{\"wait_seconds\":2}";

    e2e_conn_t x;
    assert_int_equal(e2e_conn_open(&x, port), 0);
    assert_int_equal(e2e_send_request(&x, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);
    assert_int_equal(e2e_send_request(&x, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);
    assert_int_equal(shutdown(x.fd, SHUT_WR), 0);
    char log[PATH_MAX];
    SET(log, tmp_path("pipehalf.log"));
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: client closed its sending side") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the half-close");
        e2e_pause_ms(5);
    }

    e2e_conn_t y;
    assert_int_equal(e2e_conn_open(&y, port), 0);
    assert_int_equal(e2e_send_request(&y, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);

    /* X gets both answers (nothing was claimable), then the connection ends. */
    e2e_response_t r = { 0 };
    for (int i = 0; i < 2; i++) {
        if (e2e_read_response(&x, &r) != 0) fail_msg("X: answer %d missing", i + 1);
        assert_int_equal(r.status, 204);
        e2e_response_free(&r);
    }
    e2e_conn_close(&x);
    /* Y's long-poll ends at its deadline with 204, and the daemon is alive. */
    if (e2e_read_response(&y, &r) != 0) fail_msg("Y: no answer");
    assert_int_equal(r.status, 204);
    e2e_response_free(&r);
    e2e_conn_close(&y);
    assert_true(e2e_daemon_alive(&g_dmn[0]));
    half_closed_request(port, "GET", "/healthz", NULL, &r);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}

/* Sends body to path on a connection of its own while Redis holds writes
 * (CLIENT PAUSE), so the claim is in Redis when its client resets (RST);
 * returns once the daemon saw the reset, with Redis running again. */
static void reset_during_claim(int port, const char *path, const char *body, const char *log_name)
{
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE 20000 WRITE");
    freeReplyObject(x);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, body, strlen(body)), 0);
    int client_port = local_port_of(c.fd);
    long long deadline = e2e_mono_ms() + 5000;
    while (server_unread_bytes(port, client_port) != 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never read the claim");
        e2e_pause_ms(5);
    }
    struct linger lg = { 1, 0 };
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    e2e_conn_close(&c);   /* RST */
    char log[PATH_MAX];
    SET(log, tmp_path(log_name));
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: read failed") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the reset");
        e2e_pause_ms(5);
    }
    x = e2e_rcmd(g_admin, "CLIENT UNPAUSE");
    freeReplyObject(x);
}

/* Waits (3 s at most) until message id of queue q is pending again with
 * retry_count 0: handed back, not failed. Returns how long it took (ms). */
static long long wait_handed_back(const char *prefix, const char *q, int id)
{
    long long unpaused = e2e_mono_ms();
    for (;;) {
        char status[32], count[32];
        const char *base = e2e_fmt("%s:{%s}", prefix, q);
        e2e_message_field(g_admin, base, id, "status", status, sizeof status);
        e2e_message_field(g_admin, base, id, "retry_count", count, sizeof count);
        bool back = strcmp(status, "pending") == 0;
        if (status[0] == '\0') SET(status, "?");
        long long retries = count[0] ? atoll(count) : -1;
        if (back) {
            assert_int_equal(retries, 0);
            return e2e_mono_ms() - unpaused;
        }
        if (e2e_mono_ms() - unpaused > 3000)
            fail_msg("3 s after its client reset, the claimed message is %s, not pending",
                     status);
        e2e_pause_ms(10);
    }
}

/* A claim whose client resets before the answer: the message goes straight
 * back (pending, retry_count 0, no failure counted), as a departed long-poll's
 * does, instead of staying processing until its lease expires. */
static void test_claim_whose_client_resets_is_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "reset";
    assert_int_equal(start_retryd(&g_dmn[0], "reset.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "20000", "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/rs/messages", "{\"payload\":\"keep me\",\"max_retries\":1}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);

    /* The claim is held in Redis while its client resets. */
    reset_during_claim(port, "/queues/rs/claim", "{\"lease_seconds\":60}", "reset.log");

    /* Back at once: long before the 60 s lease, and not as a failure. */
    printf("# measured a claim whose client reset: handed back %lld ms after Redis answered\n",
           wait_handed_back(prefix, "rs", 1));
    assert_int_equal(rq_int(g_admin, "HGET %s:{rs}:stats released", prefix), 1);
    assert_int_equal(rq_int(g_admin, "HGET %s:{rs}:stats failed", prefix), 0);
    /* And the next worker gets it. */
    http(port, &r, "POST", "/queues/rs/claim", NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), 1);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* Whether every byte to and from the Redis at redis_port (loopback) has been
 * read: no socket of Redis's has anything unread, and no socket to it has
 * anything left to send. */
static bool redis_sockets_drained(int redis_port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) return false;
    char line[512], port_hex[16];
    snprintf(port_hex, sizeof port_hex, ":%04X", redis_port);
    bool drained = true;
    while (fgets(line, sizeof line, f)) {
        char l[64], r[64];
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %63s %63s %*x %lx:%lx", l, r, &tx, &rx) != 4) continue;
        size_t ll = strlen(l), rl = strlen(r);
        bool ours = ll > 5 && strcmp(l + ll - 5, port_hex) == 0;
        bool to_us = rl > 5 && strcmp(r + rl - 5, port_hex) == 0;
        if ((ours && rx != 0) || (to_us && tx != 0)) drained = false;
    }
    fclose(f);
    return drained;
}

/* A claim whose client reset is handed back with `release`. When that call's
 * answer was lost too (Redis held it past --redis-timeout-ms and the link
 * dropped), the message stayed processing under a lease nobody holds: a
 * failure at its expiry, dead with max_retries 1, never seen by a worker.
 * The hand-back is sent again once the link is back (release only takes a
 * message still under the lease it names, so a second one changes nothing
 * after a first that ran). */
static void test_lost_hand_back_is_sent_again(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    redisContext *second = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(second);
    assert_int_equal(redisSetTimeout(second, (struct timeval){ 20, 0 }), REDIS_OK);
    const char *prefix = "lostback";
    assert_int_equal(start_retryd(&g_dmn[0], "lostback.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "3000", "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lb/messages", "{\"payload\":\"keep me\",\"max_retries\":1}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);

    /* Redis holds every command for FIRST_PAUSE_MS (CLIENT PAUSE ALL); meanwhile the
     * claim reaches it and its client resets. */
    enum { FIRST_PAUSE_MS = 1500, SECOND_PAUSE_MS = 6000 };
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE %d ALL", FIRST_PAUSE_MS);
    long long paused_at = e2e_mono_ms();
    freeReplyObject(x);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    const char *body = "{\"lease_seconds\":60}";
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/lb/claim", NULL, body, strlen(body)), 0);
    int client_port = local_port_of(c.fd);
    long long deadline = paused_at + FIRST_PAUSE_MS;
    while (server_unread_bytes(port, client_port) != 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never read the claim");
        e2e_pause_ms(5);
    }
    struct linger lg = { 1, 0 };
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    e2e_conn_close(&c);   /* RST */
    char log[PATH_MAX];
    SET(log, tmp_path("lostback.log"));
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: read failed") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the reset");
        e2e_pause_ms(5);
    }
    /* Redis has read the claim: a second pause sent now is held behind it
     * and starts right after the claim runs, so the release that hands the
     * message back waits SECOND_PAUSE_MS, past the daemon's timeout. */
    while (!redis_sockets_drained(g_srv.port)) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis did not read the claim");
        e2e_pause_ms(5);
    }
    assert_int_equal(redisAppendCommand(second, "CLIENT PAUSE %d ALL", SECOND_PAUSE_MS), REDIS_OK);
    int done = 0;
    while (!done) assert_int_equal(redisBufferWrite(second, &done), REDIS_OK);
    if (e2e_mono_ms() >= deadline) fail_msg("the second pause was sent after the first ended");
    void *reply = NULL;
    assert_int_equal(redisGetReply(second, &reply), REDIS_OK);   /* the claim has run */
    freeReplyObject(reply);
    /* Every client waits out the second pause; this PING is answered when it
     * ends (the daemon's link dropped meanwhile). */
    reply = redisCommand(second, "PING");
    assert_non_null(reply);
    freeReplyObject(reply);
    redisFree(second);
    assert_int_equal(rq_int(g_admin, "HGET %s:{lb}:stats claimed", prefix), 1);

    /* Once the link is back the message is pending again: released, not
     * failed, long before its 60 s lease. */
    deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "HGET %s:{lb}:stats released", prefix) != 1) {
        if (e2e_mono_ms() > deadline)
            fail_msg("the message leased for a client that reset, whose hand-back was lost, is "
                     "not handed back (processing: %lld)",
                     rq_int(g_admin, "ZCARD %s:{lb}:3:processing", prefix));
        e2e_pause_ms(20);
    }
    char *text = fx_read_file(log);
    bool dropped = text && strstr(text, "redis: link lost to") != NULL;
    free(text);
    if (!dropped) fail_msg("the link never dropped: the hand-back was not lost");
    assert_int_equal(rq_int(g_admin, "HGET %s:{lb}:stats failed", prefix), 0);
    expect_untouched_pending(port, "lb", 1);
    http(port, &r, "POST", "/queues/lb/claim", NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* A batch replay whose Redis hangs part way (the call in flight is dropped
 * at --redis-timeout-ms) answers a 503 whose detail says how many dead
 * letters it did replay, never "nothing was done" or no count at all. */
static void test_replay_all_stopped_part_way_says_how_many(void **state)
{
    (void)state;
    enum { N = 100000 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "replaystop";
    static const char seed[] =
        "local base, n, at = KEYS[1], tonumber(ARGV[1]), ARGV[2] "
        "for id = 1, n do "
        "  redis.call('HSET', base .. ':m:' .. id, 'payload', 'p', 'status', 'dead', "
        "             'retry_count', 1, 'max_retries', 1, 'created_at', at, 'updated_at', at, "
        "             'last_error', 'boom', 'dead_at', at) "
        "  redis.call('ZADD', base .. ':dead', at, id) "
        "end "
        "redis.call('ZINCRBY', base .. ':errors', n, 'boom') "
        "redis.call('SET', base .. ':seq', n) "
        "return n";
    assert_int_equal(rq_int(g_admin, "EVAL %s 1 %s:{rp} %d %lld", seed, prefix, (int)N,
                            e2e_wall_ms() - 1000), N);
    /* Started after the seed, which holds Redis for about a second: a link
     * with a 1 s timeout that met it would be reconnecting when the replay
     * comes. */
    assert_int_equal(start_retryd(&g_dmn[0], "replaystop.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rp/replay", NULL, "{\"all\":true}",
                                      12), 0);
    /* Paused once a second call has replayed: retryd sends its next call
     * only when it has read the answer to the one before, so it has then
     * counted at least one batch. (After the first call alone, its answer
     * may still be on the way when Redis stops: "stopped after 0".) */
    long long deadline = e2e_mono_ms() + 5000;
    while (rq_int(g_admin, "HGET %s:{rp}:stats replayed", prefix) <= RD_STORE_REPLAY_IDS_MAX) {
        if (e2e_mono_ms() > deadline) fail_msg("the batch replay did not start");
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    if (rc != 0) fail_msg("the batch replay stopped by a hanging Redis: no complete response");
    printf("# measured a batch replay whose Redis hung: %d %s\n", r.status, r.body);
    expect_503(&r);
    const char *detail = rd_json_string(rd_json_get(r.json, "detail"));
    long long said = -1;
    if (!detail || sscanf(detail, "The batch replay stopped after %lld", &said) != 1)
        fail_msg("the detail does not say how many were replayed: %s", detail ? detail : "none");
    long long replayed = rq_int(g_admin, "HGET %s:{rp}:stats replayed", prefix);
    /* The call in flight may or may not have replayed its batch too. */
    if (said <= 0 || said > replayed || replayed - said > 200)
        fail_msg("the detail says %lld replayed; Redis counts %lld", said, replayed);
    if (replayed >= N) fail_msg("the replay ended before Redis hung: make N larger");
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}

/* Enqueues n dead letters into q (payload "p<i>", 300 bytes), pipelined:
 * enqueue then kill. */
static void seed_dead(redisContext *c, const char *prefix, const char *q, int n)
{
    char pad[300];
    memset(pad, 'z', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 1; i <= n; i++) {
        redisAppendCommand(c, "FCALL %s 1 %s:{%s} p%d%s 1 0 %s", RD_FUNCTION("enqueue"), prefix,
                           q, i, pad, "");
        redisAppendCommand(c, "FCALL %s 2 %s:{%s} %s:{%s}:m:%d %d cut", RD_FUNCTION("kill"),
                           prefix, q, prefix, q, i, i);
    }
    for (int i = 0; i < 2 * n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL || r->type != REDIS_REPLY_ARRAY)
            fail_msg("seeding dead letters failed at reply %d", i);
        freeReplyObject(r);
    }
}

/* Every letter of 1..n is in `to` exactly once (origin {from, i}, payload
 * "p<i>..."), and `from` holds none of them, in no state. */
static void expect_redriven_once(redisContext *c, const char *prefix, const char *from,
                                 const char *to, int n)
{
    int *seen = calloc((size_t)n + 1, sizeof *seen);
    assert_non_null(seen);
    char cursor[256] = "";
    long long listed = 0;
    do {
        redisReply *r = e2e_rcmd(c, "FCALL_RO %s 1 %s:{%s} pending 1000 %s", RD_FUNCTION("list"),
                                 prefix, to, cursor);
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
            strcmp(r->element[0]->str, "ok") != 0)
            fail_msg("list of the target failed");
        snprintf(cursor, sizeof cursor, "%s", r->element[2]->str);
        for (size_t i = 3; i < r->elements; i++) {
            const redisReply *m = r->element[i];
            long long origin = -1;
            const char *oq = NULL, *payload = NULL;
            for (size_t f = 2; f + 1 < m->elements; f += 2) {
                const char *name = m->element[f]->str;
                if (strcmp(name, "origin_id") == 0) origin = atoll(m->element[f + 1]->str);
                else if (strcmp(name, "origin_queue") == 0) oq = m->element[f + 1]->str;
                else if (strcmp(name, "payload") == 0) payload = m->element[f + 1]->str;
            }
            if (origin < 1 || origin > n || !oq || strcmp(oq, from) != 0 || !payload)
                fail_msg("a target message without a good origin (%lld)", origin);
            char want[32];
            snprintf(want, sizeof want, "p%lldz", origin);
            if (strncmp(payload, want, strlen(want)) != 0)
                fail_msg("letter %lld arrived with payload %.20s", origin, payload);
            if (seen[origin]++) fail_msg("letter %lld is in the target twice", origin);
            listed++;
        }
        freeReplyObject(r);
    } while (cursor[0]);
    for (int i = 1; i <= n; i++)
        if (!seen[i]) fail_msg("letter %d never reached the target", i);
    free(seen);
    assert_int_equal(listed, n);
    assert_int_equal(rq_int(c, "ZCARD %s:{%s}:3:dead", prefix, from), 0);
    assert_int_equal(rq_int(c, "ZCARD %s:{%s}:3:redriving", prefix, from), 0);
    assert_int_equal(rq_int(c, "EXISTS %s:{%s}:3:redrive_to", prefix, from), 0);
    redisReply *k = e2e_rcmd(c, "SCAN 0 MATCH %s:{%s}:m:* COUNT 100000", prefix, from);
    if (k->element[1]->elements != 0) fail_msg("records are left in the source");
    freeReplyObject(k);
    assert_int_equal(rq_int(c, "HGET %s:{%s}:stats redriven", prefix, from), n);
}

/* A redrive cut mid-way, twice (Redis hangs past --redis-timeout-ms: 503;
 * then retryd is SIGKILLed while Redis is stopped), then repeated by a new
 * retryd: every letter lands in the target once and leaves the source. */
static void test_redrive_cut_and_repeated_moves_each_letter_once(void **state)
{
    (void)state;
    enum { N = 20000 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "redrivecut";
    assert_int_equal(start_retryd(&g_dmn[0], "redrivecut.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    seed_dead(g_admin, prefix, "rs", N);
    static const char body[] = "{\"all\":true,\"to\":\"rt\"}";

    /* 1. Redis hangs part way: the call in flight is dropped, 503. */
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_dmn[0].port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rs/replay", NULL, body,
                                      strlen(body)), 0);
    long long deadline = e2e_mono_ms() + 10000;
    while (rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix) == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the redrive did not start");
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    if (rc != 0) fail_msg("the redrive stopped by a hanging Redis: no complete response");
    printf("# redrive cut by a hanging Redis: %d %s\n", r.status, r.body);
    expect_503(&r);
    long long moved1 = rq_int(g_admin, "HGET %s:{rs}:stats redriven", prefix);
    if (moved1 >= N) fail_msg("the redrive ended before Redis hung: make N larger");

    /* 2. Repeated (once the link is back), and retryd killed while Redis
     * is stopped. */
    assert_int_equal(e2e_daemon_wait_up(&g_dmn[0], true, true, READY_TIMEOUT_MS), 0);
    long long in_before = rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix);
    assert_int_equal(e2e_conn_open(&c, g_dmn[0].port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rs/replay", NULL, body,
                                      strlen(body)), 0);
    deadline = e2e_mono_ms() + 10000;
    while (rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix) <= in_before + 300) {
        if (e2e_mono_ms() > deadline) {
            e2e_response_t late = { 0 };
            e2e_read_response(&c, &late);
            fail_msg("the repeated redrive did not go on: %d %s", late.status,
                     late.body ? late.body : "");
        }
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    rq_wait_sole_client(g_admin);
    long long moved2 = rq_int(g_admin, "HGET %s:{rs}:stats redriven", prefix);
    long long left = rq_int(g_admin, "ZCARD %s:{rs}:3:redriving", prefix);
    printf("# redrive: %lld moved before the 503, %lld before SIGKILL, %lld left redriving\n",
           moved1, moved2, left);
    if (moved2 >= N) fail_msg("the redrive ended before retryd was killed: make N larger");

    /* 3. A new retryd, the same call: it completes the rest. */
    assert_int_equal(start_retryd(&g_dmn[1], "redrivecut2.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    http(g_dmn[1].port, &r, "POST", "/queues/rs/replay", body);
    long long replayed = e2e_jint(e2e_expect_json(&r, 200), "replayed");
    assert_true(replayed >= N - moved2 - left);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    expect_redriven_once(g_admin, prefix, "rs", "rt", N);
    assert_int_equal(rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix), N);
    stop_retryd(&g_dmn[1]);
}

/* The same for a claim with settle (docs/reference.md "Settle and claim"): the messages it claimed go
 * straight back, and its settlements stay applied. */
static void test_settle_claim_whose_client_resets_is_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "sreset";
    assert_int_equal(start_retryd(&g_dmn[0], "sreset.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "20000", "--log-level", "debug",
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 0; i < 3; i++) {
        http(port, &r, "POST", "/queues/ss/messages", "{\"payload\":\"job\"}");
        e2e_expect_json(&r, 201);
    }
    http(port, &r, "POST", "/queues/ss/claim", NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    char body[512];
    snprintf(body, sizeof body,
             "{\"count\":2,\"settle\":[{\"id\":1,\"lease_token\":\"%s\",\"outcome\":\"succeeded\"}]}",
             e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    reset_during_claim(port, "/queues/ss/claim", body, "sreset.log");
    wait_handed_back(prefix, "ss", 2);
    wait_handed_back(prefix, "ss", 3);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats released", prefix), 2);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats failed", prefix), 0);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats succeeded", prefix), 1);
    char status[32];
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{ss}", prefix), 1, "status", status,
                                          sizeof status), "succeeded");
    /* The next worker gets them, in their claim order. */
    http(port, &r, "POST", "/queues/ss/claim", "{\"count\":5}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 1), "id"), 3);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* ========================================================================= */
/* 7. valgrind: no leak after a graceful shutdown                            */
/* ========================================================================= */

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (path == NULL) return false;
    char dir[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, prog);
        if (access(dir, X_OK) == 0) return true;
        p += n;
        if (*p == ':') p++;
    }
    return false;
}

/* True when the binary was built with AddressSanitizer (valgrind cannot run it). */
static bool is_asan_build(const char *bin)
{
    FILE *f = fopen(bin, "rb");
    if (f == NULL) return false;
    static const char needle[] = "__asan_init";
    enum { OVERLAP = sizeof needle - 1 };
    static char buf[1 << 16];
    size_t have = 0;
    bool found = false;
    for (;;) {
        size_t n = fread(buf + have, 1, sizeof buf - have, f);
        if (n == 0) break;
        have += n;
        if (memmem(buf, have, needle, OVERLAP)) {
            found = true;
            break;
        }
        /* Keep the tail: the needle may straddle two reads. */
        memmove(buf, buf + have - OVERLAP, OVERLAP);
        have = OVERLAP;
    }
    fclose(f);
    return found;
}

static void test_valgrind_clean_shutdown(void **state)
{
    (void)state;
    if (!on_path("valgrind")) {
        printf("# valgrind is not installed: test_valgrind_clean_shutdown skipped\n");
        skip();
    }
    if (is_asan_build(g_bin)) {
        printf("# %s is an ASan build, which valgrind cannot run: "
               "test_valgrind_clean_shutdown skipped\n", g_bin);
        skip();
    }
    char prefix[128];
    PREFIX(prefix, "vg");
    char url[64], pfx[128], log[PATH_MAX];
    SET(url, e2e_redis_url(g_shared_port));
    SET(pfx, prefix);
    SET(log, tmp_path("valgrind.log"));
    static const char *const wrapper[] = { "valgrind", "--leak-check=full",
                                           "--errors-for-leak-kinds=definite,indirect",
                                           "--error-exitcode=99", NULL };
    const char *args[] = { "--redis", url, "--prefix", pfx, "--tick-ms", "100", "--log-level",
                           "info", "--max-body", "4096", NULL };
    e2e_daemon_t *d = &g_dmn[0];
    assert_int_equal(e2e_daemon_spawn_logged(d, wrapper, g_bin, args, log), 0);
    long long started = e2e_mono_ms();
    if (e2e_daemon_wait_status(d, "/readyz", 200, 30000) != 0)
        fail_msg("retryd under valgrind not ready within 30 s");
    printf("# measured valgrind: ready after %lld ms\n", e2e_mono_ms() - started);
    int port = d->port;
    e2e_response_t r = { 0 };
    struct step {
        const char *method, *path, *body;
        int status;
    } steps[] = {
        { "POST", "/queues/v/messages", "{\"payload\":\"one\"}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"two\",\"max_retries\":1}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"three\",\"idempotency_key\":\"k\"}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"three\",\"idempotency_key\":\"k\"}", 200 },
        { "POST", "/queues/v/messages", "{\"payload\":\"later\",\"delay_seconds\":60}", 201 },
        { "GET", "/queues/v/messages/1", NULL, 200 },
        { "GET", "/queues/v/messages?limit=2", NULL, 200 },
        { "GET", "/queues/v/messages?status=pending", NULL, 200 },
        { "POST", "/queues/v/claim", "{\"lease_seconds\":30}", 200 },          /* 1 */
        { "POST", "/queues/v/messages/1/extend", "{\"lease_seconds\":40}", 200 },
        { "POST", "/queues/v/messages/1/succeed", NULL, 200 },
        { "POST", "/queues/v/claim", NULL, 200 },                               /* 2 */
        { "POST", "/queues/v/messages/2/fail", "{\"error\":\"bad\"}", 200 },   /* dead */
        { "POST", "/queues/v/messages/2/replay", NULL, 200 },
        { "POST", "/queues/v/claim", "{\"count\":5}", 200 },                    /* 2, 3 */
        { "POST", "/queues/v/messages/3/snooze", "{\"delay_seconds\":0}", 200 },
        { "POST", "/queues/v/claim", NULL, 200 },                               /* 3 again */
        { "POST", "/queues/v/claim",
          "{\"settle\":[{\"id\":3,\"outcome\":\"snoozed\",\"delay_seconds\":0}]}", 200 },
        { "POST", "/queues/v/messages/2/fail", "{\"error\":\"worse\",\"retryable\":false}", 200 },
        { "POST", "/queues/v/replay", "{\"all\":true}", 200 },
        { "POST", "/queues/v/replay", "{\"ids\":[1,2,3]}", 200 },
        { "POST", "/queues/v/succeed", "{\"messages\":[{\"id\":3},{\"id\":99}]}", 200 },
        { "POST", "/queues/v/succeed",
          "{\"messages\":[{\"id\":3,\"outcome\":\"snoozed\",\"delay_seconds\":0}]}", 200 },
        { "POST", "/queues/v/messages/4/kill", "{\"reason\":\"manual\"}", 200 },
        { "DELETE", "/queues/v/messages/4", NULL, 204 },
        { "POST", "/queues/empty/claim", "{\"wait_seconds\":1}", 204 },         /* long-poll */
        { "GET", "/queues/v/stats", NULL, 200 },
        { "GET", "/queues", NULL, 200 },
        { "GET", "/metrics", NULL, 200 },
        { "GET", "/readyz", NULL, 200 },
        { "GET", "/healthz", NULL, 200 },
        { "GET", "/nowhere", NULL, 404 },
        { "PUT", "/queues/v/messages", NULL, 405 },
        { "POST", "/queues/v/messages", "{}", 422 },
        { "POST", "/queues/v/messages", "{not json", 400 },
        { "GET", "/queues/v/messages/77", NULL, 404 },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        http(port, &r, steps[i].method, steps[i].path, steps[i].body);
        if (r.status != steps[i].status)
            fail_msg("%s %s under valgrind: %d, expected %d: %s", steps[i].method, steps[i].path,
                     r.status, steps[i].status, r.body);
    }
    /* Error paths that close the connection: 413, 431. */
    char big[5001];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    http(port, &r, "POST", "/queues/v/messages", big);
    e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    e2e_conn_close(&g_conn);
    char *hdr = malloc(20 * 1024 + 16);
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'h', 20 * 1024);
    memcpy(hdr + 7 + 20 * 1024, "\r\n", 3);
    e2e_http_on(&g_conn, port, &r, "GET", "/healthz", hdr, NULL, 0);
    free(hdr);
    assert_int_equal(r.status, 431);
    e2e_conn_close(&g_conn);
    /* A long-poll whose client leaves, and a request cut in the middle. */
    e2e_conn_t gone;
    assert_int_equal(e2e_conn_open(&gone, port), 0);
    assert_int_equal(e2e_send_request(&gone, "POST", "/queues/gone/claim", NULL,
                                      "{\"wait_seconds\":2}", 18), 0);
    long long deadline = e2e_mono_ms() + 10000;
    while (!wake_subscribed(g_shared, pfx, "gone")) {   /* parked */
        if (e2e_mono_ms() > deadline) fail_msg("the long-poll never parked");
        e2e_pause_ms(20);
    }
    e2e_conn_close(&gone);
    int cut = e2e_connect(port);
    assert_true(cut >= 0);
    static const char partial[] =
        "POST /queues/v/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pay";
    assert_int_equal(e2e_send_all(cut, partial, sizeof partial - 1), 0);
    close(cut);
    /* The server is still fine. */
    http(port, &r, "GET", "/healthz", NULL);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    long long stop_at = e2e_mono_ms();
    int status = e2e_daemon_stop(d, SIGTERM, 60000);
    long long stop_ms = e2e_mono_ms() - stop_at;
    printf("# measured valgrind: SIGTERM to exit %lld ms, exit status %d\n", stop_ms, status);
    if (status != 0) {
        char *text = fx_read_file(log);
        printf("%s\n", text ? text : "(no log)");
        free(text);
        fail_msg("retryd under valgrind: %s %d (99: valgrind found errors or leaks; log above)",
                 status < 0 ? "did not exit within 60 s," : "exit status", status);
    }
    /* It really ran under valgrind, and valgrind found nothing. */
    char *text = fx_read_file(log);
    assert_non_null(text);
    bool memcheck = strstr(text, "Memcheck") != NULL;
    bool clean = strstr(text, "ERROR SUMMARY: 0 errors") != NULL;
    free(text);
    assert_true(memcheck);
    assert_true(clean);
    /* Redis holds what the requests did. */
    char cur[32];
    assert_string_equal(e2e_message_field(g_shared, e2e_fmt("%s:{v}", pfx), 1, "status", cur,
                                          sizeof cur), "succeeded");
    assert_int_equal(rq_int(g_shared, "EXISTS %s:{v}:m:4", pfx), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_kill9_retryd_leases_come_back),
        T(test_kill9_retryd_under_load),
        T(test_sigterm_with_requests_in_flight),
        T(test_half_closed_clients_get_their_answers),
        T(test_pipelined_long_polls_after_half_close),
        T(test_claim_whose_client_resets_is_handed_back),
        T(test_lost_hand_back_is_sent_again),
        T(test_settle_claim_whose_client_resets_is_handed_back),
        T(test_replay_all_stopped_part_way_says_how_many),
        T(test_redrive_cut_and_repeated_moves_each_letter_once),
        T(test_valgrind_clean_shutdown),
    };
    return cmocka_run_group_tests_name("faults_crash", tests, group_setup, group_teardown);
}
