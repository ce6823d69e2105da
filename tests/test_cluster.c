/* test_cluster.c - tests of retryd on Redis Cluster (docs/cluster.md,
 * docs/design.md "Where the state lives", docs/reference.md "Scale").
 *
 * Group "cluster-unit" needs no network: known CRC16 slot values and the
 * slot a command routes to (rd_cluster_slot, rd_cluster_command_slot).
 *
 * Group "cluster" starts a throwaway cluster with scripts/cluster.sh (3
 * masters, 1 replica each, client ports 20000-29999) and two daemons, A and
 * B, with --redis-cluster, and proves in order:
 *   1. rd_cluster_slot agrees with CLUSTER KEYSLOT on 650 keys;
 *  1b. with one master SIGSTOPped at start, /readyz stays 503 until its
 *      link's first attempt ends, an enqueue for its slots sent meanwhile
 *      waits for the link, and one sent right after /readyz is 200 gets 201;
 *   2. queues on every master work end to end through both instances, GET
 *      /queues and /metrics see them all, the library is on every master;
 *   3. long-poll wake-ups cross masters (enqueue through B, claim parked on A);
 *   4. CLUSTER FAILOVER under load loses and duplicates nothing, answers only
 *      201/200/204/503, and retryd recovers;
 *   5. the promoted master has the library (deleted on it beforehand, so only
 *      retryd can have put it there);
 *   6. retryd's links to the demoted master are closed (docs/cluster.md);
 *   7. while a slot is MIGRATING/IMPORTING and no key has moved, calls do not
 *      run against the importing node's empty copy of the queue;
 *   8. a call that exhausts its redirects answers 503, not 500;
 *   9. a hand-driven slot migration (SETSLOT IMPORTING/MIGRATING, MIGRATE in
 *      batches of 10 keys as redis-cli does, SETSLOT NODE) under load loses,
 *      duplicates and reuses nothing. A key MIGRATE cannot move because the
 *      target already has it (BUSYKEY) is reported, then moved with REPLACE
 *      so the migration can finish and the damage be counted;
 *  10. A and B stop; two instances with --alert-url deliver one event per
 *      death from queues on every master, each exactly once, and
 *      acknowledge each in its queue's slot (docs/dead-letters.md).
 * The cluster is always stopped: group teardown, a setup that fails half way,
 * an atexit hook and SIGINT/SIGTERM (which kill the node pids directly).
 *
 * Needs RETRYD_BIN; scripts/cluster.sh is found relative to the working
 * directory (the repository root) unless RETRYD_CLUSTER_SH names it. Worker
 * threads never call cmocka: they record what they saw; the main thread
 * stops them before asserting. Measurements are printed as "test_cluster: ". */

#include "cluster_support.h"

/* ======================================================================== */
/* Group 1: no network                                                      */
/* ======================================================================== */

/* Values from the Redis Cluster specification (CRC16 XMODEM check value of
 * "123456789" is 0x31C3 = 12739) and from CLUSTER KEYSLOT. */
static void test_slot_known_values(void **state)
{
    (void)state;
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of(""), 0);
    assert_int_equal(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    /* The specification's own examples of hash tags. */
    assert_int_not_equal(slot_of("foo{}{bar}"), slot_of("bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* Binary-safe: a NUL inside the key counts. */
    assert_int_not_equal(rd_cluster_slot("a\0b", 3), rd_cluster_slot("a", 1));
    assert_int_equal(rd_cluster_slot("{a\0b}x", 6), rd_cluster_slot("a\0b", 3));
}

static void test_command_slot_fcall_and_keys(void **state)
{
    (void)state;
    int q = (int)slot_of("retryd:{q}");
    assert_int_equal(cmd_slot(5, "FCALL", "enqueue", "1", "retryd:{q}", "payload"), q);
    assert_int_equal(cmd_slot(4, "FCALL", "claim", "1", "retryd:{q}"), q);
    assert_int_equal(cmd_slot(5, "fcall", "succeed", "2", "retryd:{q}", "retryd:{q}:m:7"), q);
    assert_int_equal(cmd_slot(4, "FCALL_RO", "get", "1", "retryd:{q}"), q);
    assert_int_equal(cmd_slot(5, "fcall_ro", "list", "1", "{other}", "x"), (int)slot_of("other"));
    assert_int_equal(cmd_slot(3, "SADD", "retryd:queues", "q"), (int)slot_of("retryd:queues"));
    assert_int_equal(cmd_slot(2, "SMEMBERS", "retryd:queues"), (int)slot_of("retryd:queues"));
    assert_int_equal(cmd_slot(1, "PING"), -1);
    assert_int_equal(cmd_slot(2, "PING", "hello"), -1);
    assert_int_equal(cmd_slot(3, "CONFIG", "GET", "ap*"), -1);
    /* Binary keys: the length counts, not the NUL. */
    const char *argv[] = { "FCALL", "f", "1", "{a\0b}" };
    size_t lens[] = { 5, 1, 1, 5 };
    assert_int_equal(rd_cluster_command_slot(4, argv, lens), (int)rd_cluster_slot("a\0b", 3));
}

/* numkeys 0: a keyless call (any master will do), with or without ARGV. */
static void test_command_slot_fcall_without_keys(void **state)
{
    (void)state;
    assert_int_equal(cmd_slot(5, "FCALL", "f", "0", "arg1", "arg2"), -1);
    assert_int_equal(cmd_slot(4, "FCALL_RO", "f", "0", "arg1"), -1);
    /* No ARGV at all: "FCALL f 0" is keyless too (cluster.h: -1 for a keyless
     * command), not routed by the function's name. */
    int got = cmd_slot(3, "FCALL", "some_function", "0");
    if (got != -1)
        fail_msg("rd_cluster_command_slot(FCALL some_function 0) = %d (the slot of the "
                 "function name \"some_function\" is %u), want -1", got,
                 slot_of("some_function"));
}

/* ------------------------------------------------------------------------ */
/* 1. rd_cluster_slot against CLUSTER KEYSLOT                               */
/* ------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

typedef struct key {
    char bytes[96];
    size_t len;
} slot_key_t;

static void add_key(slot_key_t *keys, size_t *n, size_t cap, const char *s, size_t len)
{
    if (*n >= cap || len > sizeof keys[0].bytes) return;
    memcpy(keys[*n].bytes, s, len);
    keys[*n].len = len;
    (*n)++;
}

static void test_slot_matches_cluster_keyslot(void **state)
{
    (void)state;
    enum { CAP = 1200 };
    static slot_key_t keys[CAP];
    size_t n = 0;
    static const char *fixed[] = {
        "", "{}", "{", "}", "{a", "a}", "}{", "}{a}", "a{b}c{d}", "{{x}}", "{}x", "x{}",
        "{}{x}", "{x}{}", "a{}b{c}d", "{ }", "{{}}", "{}}", "{{}", "123456789", "foo",
        "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap",
        "foo{bar}{zap}", "{bar", "retryd:queues", "retryd:{q}", "retryd:{q}:m:7",
        "retryd:{q}:ready", "retryd:{}:m:1", "{retryd}:{q}",
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        add_key(keys, &n, CAP, fixed[i], strlen(fixed[i]));
    /* Binary: NUL and high bytes around braces. */
    add_key(keys, &n, CAP, "a\0{b}", 5);
    add_key(keys, &n, CAP, "{a\0b}c", 6);
    add_key(keys, &n, CAP, "\xff{\xfe}\x80", 5);
    add_key(keys, &n, CAP, "{\0}", 3);
    /* retryd's own key forms, names escaped by src/keys.c. */
    static const char *names[] = {
        "q", "emails", "a{b}", "{x}", "}{", "a:b", "100%", "%7B", "tab\there", "\x01\x1f\x7f",
        "caf\xc3\xa9", "{}", "x}y{z", "a b", "%%{{}}::",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        rd_buf_t b = RD_BUF_INIT;
        rd_keys_queue_base(&b, "retryd", names[i], strlen(names[i]));
        add_key(keys, &n, CAP, b.data, b.len);
        rd_buf_t m = RD_BUF_INIT;
        rd_keys_message(&m, b.data, b.len, 7);
        add_key(keys, &n, CAP, m.data, m.len);
        rd_buf_free(&m);
        rd_buf_free(&b);
    }
    /* Random keys over a small alphabet rich in braces, then random bytes. */
    static const char alphabet[] = "{}{}{}ab:%x\0";
    while (n < 400) {
        char k[40];
        size_t len = rng() % 24;
        for (size_t i = 0; i < len; i++) k[i] = alphabet[rng() % (sizeof alphabet - 1)];
        add_key(keys, &n, CAP, k, len);
    }
    while (n < 650) {
        char k[64];
        size_t len = rng() % 64;
        for (size_t i = 0; i < len; i++) k[i] = (char)(rng() & 0xff);
        if (len > 4 && rng() % 2) k[rng() % len] = '{';
        if (len > 4 && rng() % 2) k[rng() % len] = '}';
        add_key(keys, &n, CAP, k, len);
    }

    /* Pipelined, binary-safe. */
    redisContext *c = node_ctx(&g_nodes[0]);
    assert_non_null(c);
    for (size_t i = 0; i < n; i++) {
        const char *argv[] = { "CLUSTER", "KEYSLOT", keys[i].bytes };
        size_t lens[] = { 7, 7, keys[i].len };
        assert_int_equal(redisAppendCommandArgv(c, 3, argv, lens), REDIS_OK);
    }
    size_t mismatches = 0;
    for (size_t i = 0; i < n; i++) {
        void *rv = NULL;
        if (redisGetReply(c, &rv) != REDIS_OK || rv == NULL) fail_msg("KEYSLOT: %s", c->errstr);
        redisReply *r = rv;
        if (r->type != REDIS_REPLY_INTEGER) fail_msg("KEYSLOT answered type %d", r->type);
        unsigned ours = rd_cluster_slot(keys[i].bytes, keys[i].len);
        if ((long long)ours != r->integer) {
            if (mismatches++ < MAX_PROBLEMS_SHOWN)
                fprintf(stderr, "test_cluster: slot of \"%s\" (%zu bytes): ours %u, Redis %lld\n",
                        show_bytes(keys[i].bytes, keys[i].len), keys[i].len, ours, r->integer);
        }
        freeReplyObject(r);
    }
    printf("test_cluster: %zu keys: rd_cluster_slot == CLUSTER KEYSLOT for %zu\n", n,
           n - mismatches);
    assert_true(n >= 500);
    assert_int_equal(mismatches, 0);
}

/* ------------------------------------------------------------------------ */
/* Readiness at start: every master's link has had its first attempt        */
/* ------------------------------------------------------------------------ */

static pid_t node_pid(cnode_t *n)
{
    redisReply *r = ncmd(n, "INFO server");
    pid_t pid = 0;
    const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
    if (at) pid = (pid_t)atol(at + strlen("process_id:"));
    if (r) freeReplyObject(r);
    return pid;
}

/* One master is SIGSTOPped before retryd starts: its TCP connect completes
 * (the kernel accepts) but the handshake hangs. /readyz must stay 503 until
 * that link's first attempt has ended; an enqueue for its slots sent
 * meanwhile waits for the link, and one sent right after /readyz turns 200
 * is answered 201, never 503. The stop stays well under the cluster's node
 * timeout (2 s) so no failover starts. */
static void test_ready_waits_for_every_master(void **state)
{
    (void)state;
    enum { STOPPED_MS = 900, EARLY_AT_MS = 500 };
    const char *last_seed = strrchr(g_seeds, ',');
    int control_port = last_seed ? atoi(strrchr(last_seed, ':') + 1) : 0;
    cnode_t *m[MAX_NODES], *held = NULL;
    size_t nm = masters(m);
    for (size_t i = 0; i < nm && held == NULL; i++)
        if (m[i]->port != control_port && m[i] != g_slot_owner[registry_slot()]) held = m[i];
    if (held == NULL) fail_msg("no master to hold back");
    char q1[64], q2[64];
    pick_queue_on(q1, sizeof q1, "early", held);
    pick_queue_on(q2, sizeof q2, "after", held);
    pid_t pid = node_pid(held);
    if (pid <= 0) fail_msg("no process_id for master :%d", held->port);
    redisFree(held->ctx);         /* the test's own link would stall too */
    held->ctx = NULL;

    e2e_daemon_t d = { 0 };
    e2e_flags_t f;
    e2e_flags(&f, "--redis-cluster", g_seeds, g_prefix, TICK_MS, "warn", "--redis-timeout-ms",
              "8000", NULL);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    g_stopped_pid = pid;
    long long t0 = e2e_mono_ms();
    if (e2e_daemon_spawn(&d, g_bin, f.argv) != 0) fail_msg("cannot start retryd");
    e2e_conn_t early = { .fd = -1 };
    int answered = 0, ready_early = 0;
    bool sent = false;
    while (e2e_mono_ms() - t0 < STOPPED_MS) {
        int st = e2e_status_once(d.port, "GET", "/readyz");
        if (st == 200) ready_early++;
        if (st > 0) answered++;
        if (!sent && e2e_mono_ms() - t0 >= EARLY_AT_MS && st > 0) {
            if (e2e_conn_open(&early, d.port) != 0 ||
                e2e_send_request(&early, "POST",
                                 e2e_fmt("/queues/%s/messages", e2e_url_encode(q1)), NULL,
                                 "{\"payload\":\"early\"}", 19) != 0)
                fail_msg("cannot send the early enqueue");
            sent = true;
        }
        e2e_pause_ms(20);
    }
    kill(pid, SIGCONT);
    g_stopped_pid = 0;
    printf("test_cluster: /readyz answered %d times while master :%d was stopped, %d of them "
           "200\n", answered, held->port, ready_early);
    if (ready_early > 0) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("/readyz was 200 %d times while master :%d's link was connecting",
                 ready_early, held->port);
    }
    if (answered == 0 || !sent) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("retryd did not answer while the master was stopped");
    }
    if (e2e_daemon_wait_status(&d, "/readyz", 200, READY_TIMEOUT_MS) != 0) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("retryd did not become ready after the master resumed");
    }
    printf("test_cluster: ready %lld ms after start (master resumed at %d ms)\n",
           e2e_mono_ms() - t0, STOPPED_MS);
    e2e_response_t r = { 0 };
    e2e_http_via(g_conns, 2, d.port, &r, "POST",
                 e2e_fmt("/queues/%s/messages", e2e_url_encode(q2)), "{\"payload\":\"after\"}");
    int after = r.status;
    char body[256];
    snprintf(body, sizeof body, "%s", r.body ? r.body : "");
    e2e_response_free(&r);
    int early_status = e2e_read_response(&early, &r) == 0 ? r.status : -1;
    char early_body[256];
    snprintf(early_body, sizeof early_body, "%s", r.body ? r.body : "");
    e2e_response_free(&r);
    e2e_conn_close(&early);
    int stopped = e2e_daemon_stop(&d, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (after != 201) fail_msg("enqueue right after /readyz 200: %d %s", after, body);
    if (early_status != 201)
        fail_msg("the enqueue sent while the master's link was connecting: %d %s", early_status,
                 early_body);
    assert_int_equal(stopped, 0);
}

/* ------------------------------------------------------------------------ */
/* 2. Queues on every master, end to end                                    */
/* ------------------------------------------------------------------------ */

static bool has_library(cnode_t *n)
{
    redisReply *r = ncmd(n, "FUNCTION LIST LIBRARYNAME " RD_LIBRARY_NAME);
    bool found = false;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *lib = r->element[i];
        for (size_t j = 0; lib->type == REDIS_REPLY_ARRAY && j + 1 < lib->elements; j += 2)
            if (lib->element[j]->type == REDIS_REPLY_STRING &&
                strcmp(lib->element[j]->str, "library_name") == 0 &&
                lib->element[j + 1]->type == REDIS_REPLY_STRING &&
                strcmp(lib->element[j + 1]->str, RD_LIBRARY_NAME) == 0)
                found = true;
    }
    if (r) freeReplyObject(r);
    return found;
}

/* enqueue/claim/succeed; fail with retry_after_seconds 0 and claim again;
 * fail to dead, list dead, replay; stats. All through port. */
static void queue_lifecycle(int port, const char *q, cnode_t *owner)
{
    msg_t m1 = enqueue_to(port, q, "{\"payload\":\"one\"}");
    assert_string_equal(m1.status, "pending");
    msg_t c1 = claim_from(port, q);
    assert_int_equal(c1.id, m1.id);
    assert_string_equal(settle(port, q, &c1, "succeed", NULL).status, "succeeded");

    msg_t m2 = enqueue_to(port, q, "{\"payload\":\"two\",\"max_retries\":3}");
    msg_t c2 = claim_from(port, q);
    assert_int_equal(c2.id, m2.id);
    msg_t f2 = settle(port, q, &c2, "fail", "\"error\":\"transient\",\"retry_after_seconds\":0");
    assert_string_equal(f2.status, "pending");
    assert_int_equal(f2.retry_count, 1);
    msg_t c2b = claim_from(port, q);
    assert_int_equal(c2b.id, m2.id);
    assert_int_equal(c2b.retry_count, 1);
    assert_string_equal(settle(port, q, &c2b, "succeed", NULL).status, "succeeded");

    msg_t m3 = enqueue_to(port, q, "{\"payload\":\"three\",\"max_retries\":1}");
    msg_t c3 = claim_from(port, q);
    assert_int_equal(c3.id, m3.id);
    msg_t f3 = settle(port, q, &c3, "fail", "\"error\":\"fatal boom\"");
    assert_string_equal(f3.status, "dead");

    e2e_response_t r = { 0 };
    http_to(port, &r, "GET", e2e_fmt("/queues/%s/messages?status=dead", e2e_url_encode(q)), NULL);
    rd_json_t *j = expect_json(&r, 200, "list dead");
    assert_int_equal(e2e_jint(j, "total"), 1);
    rd_json_t *list = e2e_jget(j, "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), m3.id);
    assert_string_equal(e2e_jstr(rd_json_array_at(list, 0), "last_error"), "fatal boom");

    msg_t p3 = call_msg(port, "POST",
                        e2e_fmt("/queues/%s/messages/%lld/replay", e2e_url_encode(q), m3.id), NULL,
                        200, "replay");
    assert_string_equal(p3.status, "pending");
    assert_int_equal(p3.retry_count, 0);
    msg_t c3b = claim_from(port, q);
    assert_int_equal(c3b.id, m3.id);
    assert_string_equal(settle(port, q, &c3b, "succeed", NULL).status, "succeeded");

    http_to(port, &r, "GET", e2e_fmt("/queues/%s/stats", e2e_url_encode(q)), NULL);
    j = expect_json(&r, 200, "stats");
    assert_string_equal(e2e_jstr(j, "queue"), q);
    rd_json_t *totals = e2e_jget(j, "totals"), *counts = e2e_jget(j, "counts");
    assert_int_equal(e2e_jint(totals, "enqueued"), 3);
    assert_int_equal(e2e_jint(totals, "succeeded"), 3);
    assert_int_equal(e2e_jint(totals, "dead"), 1);
    assert_int_equal(e2e_jint(totals, "replayed"), 1);
    assert_int_equal(e2e_jint(totals, "retried"), 1);
    assert_int_equal(e2e_jint(counts, "succeeded"), 3);
    assert_int_equal(e2e_jint(counts, "dead"), 0);
    assert_int_equal(e2e_jint(counts, "pending"), 0);
    e2e_response_free(&r);

    /* The data is on the master that owns the queue's slot. */
    assert_int_equal(ncmd_int(owner, "EXISTS %s", qkey(q, e2e_fmt("m:%lld", m1.id))), 1);
    assert_int_equal(ncmd_int(owner, "HGET %s enqueued", qkey(q, "stats")), 3);
    assert_int_equal(ncmd_int(owner, "ZCARD %s", qkey(q, "3:succeeded")), 3);
}

static void test_queues_on_every_master_end_to_end(void **state)
{
    (void)state;
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    char queues[4][64];
    cnode_t *owners[4];
    for (size_t i = 0; i < nm; i++) {
        pick_queue_on(queues[i], sizeof queues[i], "e2e", m[i]);
        owners[i] = m[i];
    }
    /* A name that needs escaping, wherever it lands. */
    snprintf(queues[nm], sizeof queues[nm], "we{ird}:q%% %ld", (long)getpid());
    int ws = queue_slot_live(queues[nm]);
    assert_true(ws >= 0);
    owners[nm] = g_slot_owner[ws];
    size_t nq = nm + 1;

    for (size_t i = 0; i < nq; i++) {
        int slot = queue_slot_live(queues[i]);
        printf("test_cluster: queue \"%s\" slot %d on master :%d\n", queues[i], slot,
               owners[i]->port);
        queue_lifecycle(i % 2 ? g_b.port : g_a.port, queues[i], owners[i]);
    }

    /* GET /queues through both instances lists every queue. */
    int ports[] = { g_a.port, g_b.port };
    for (size_t p = 0; p < 2; p++) {
        e2e_response_t r = { 0 };
        http_to(ports[p], &r, "GET", "/queues", NULL);
        rd_json_t *list = e2e_jget(expect_json(&r, 200, "GET /queues"), "queues");
        for (size_t i = 0; i < nq; i++) {
            bool found = false;
            for (size_t k = 0; k < rd_json_array_size(list); k++) {
                rd_json_t *e = rd_json_array_at(list, k);
                if (strcmp(e2e_jstr(e, "name"), queues[i]) == 0) {
                    found = true;
                    assert_int_equal(e2e_jint(e2e_jget(e, "counts"), "succeeded"), 3);
                }
            }
            if (!found) fail_msg("GET /queues on :%d lacks \"%s\": %s", ports[p], queues[i], r.body);
        }
        /* /metrics has each queue's counters. */
        http_to(ports[p], &r, "GET", "/metrics", NULL);
        assert_int_equal(r.status, 200);
        for (size_t i = 0; i < nq; i++) {
            const char *line = e2e_fmt("retryd_enqueued_total{queue=\"%s\"} 3\n", queues[i]);
            if (strstr(r.body, line) == NULL)
                fail_msg("/metrics on :%d lacks \"%.*s\"", ports[p], (int)strlen(line) - 1, line);
        }
        e2e_response_free(&r);
    }

    /* The library is on every master. */
    for (size_t i = 0; i < nm; i++)
        if (!has_library(m[i]))
            fail_msg("FUNCTION LIST on master :%d lacks " RD_LIBRARY_NAME, m[i]->port);
}

/* ------------------------------------------------------------------------ */
/* 3. Long-poll across masters                                              */
/* ------------------------------------------------------------------------ */

typedef struct lp_call {
    int port;
    char path[256];
    atomic_int sent;
    int status;
    long long id;
    long long done_us;
    char error[160];
} lp_call_t;

/* Redrive (docs/reference.md "Redrive") between queues on two different masters: a letter a
 * cut redrive left in the source's redriving state is completed first, to
 * its recorded target, then the selected ones; each lands once, with
 * origin, on the target's master, and leaves the source's. */
static void test_redrive_across_masters(void **state)
{
    (void)state;
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    assert_true(nm >= 2);
    char src[64], dst[64];
    pick_queue_on(src, sizeof src, "rd-src", m[0]);
    pick_queue_on(dst, sizeof dst, "rd-dst", m[1]);
    long long ids[3];
    for (int i = 0; i < 3; i++) {
        msg_t e = enqueue_to(g_a.port, src, e2e_fmt("{\"payload\":\"letter %d\",\"max_retries\":1}", i));
        msg_t c = claim_from(g_a.port, src);
        assert_int_equal(c.id, e.id);
        assert_string_equal(settle(g_a.port, src, &c, "fail", "\"error\":\"boom\"").status, "dead");
        ids[i] = e.id;
    }
    /* A cut redrive: step 1 ran on the source's master, nothing after. */
    rd_buf_t base = RD_BUF_INIT;
    queue_base(&base, src);
    redisReply *t = ncmd(m[0], "FCALL %s 1 %s %s ids %lld", RD_FUNCTION("redrive_take"), base.data,
                         dst, ids[0]);
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->elements, 3);
    freeReplyObject(t);
    rd_buf_free(&base);
    e2e_response_t r = { 0 };
    http_to(g_b.port, &r, "GET", e2e_fmt("/queues/%s/messages/%lld", e2e_url_encode(src), ids[0]),
            NULL);
    assert_string_equal(e2e_jstr(expect_json(&r, 200, "get redriving"), "redriving_to"), dst);

    const char *path = e2e_fmt("/queues/%s/replay", e2e_url_encode(src));
    http_to(g_b.port, &r, "POST", path, e2e_fmt("{\"ids\":[%lld],\"to\":\"%s\"}", ids[1], dst));
    assert_int_equal(e2e_jint(expect_json(&r, 200, "redrive ids"), "replayed"), 2);
    http_to(g_a.port, &r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", dst));
    assert_int_equal(e2e_jint(expect_json(&r, 200, "redrive all"), "replayed"), 1);
    http_to(g_a.port, &r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", dst));
    assert_int_equal(e2e_jint(expect_json(&r, 200, "redrive again"), "replayed"), 0);

    http_to(g_a.port, &r, "GET", e2e_fmt("/queues/%s/messages?status=pending",
                                         e2e_url_encode(dst)), NULL);
    rd_json_t *list = e2e_jget(expect_json(&r, 200, "list target"), "messages");
    assert_int_equal(rd_json_array_size(list), 3);
    for (size_t i = 0; i < 3; i++) {
        rd_json_t *o = e2e_jget(rd_json_array_at(list, i), "origin");
        assert_string_equal(e2e_jstr(o, "queue"), src);
        assert_int_equal(e2e_jint(o, "id"), ids[i]);
    }
    e2e_response_free(&r);
    assert_int_equal(ncmd_int(m[1], "LLEN %s", qkey(dst, "3:ready")), 3);
    assert_int_equal(ncmd_int(m[0], "ZCARD %s", qkey(src, "3:dead")), 0);
    assert_int_equal(ncmd_int(m[0], "ZCARD %s", qkey(src, "3:redriving")), 0);
    assert_int_equal(ncmd_int(m[0], "HGET %s redriven", qkey(src, "stats")), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ncmd_int(m[0], "EXISTS %s", qkey(src, e2e_fmt("m:%lld", ids[i]))), 0);
}

/* Policy dead_letter_queue with source and target on two masters: each
 * death moves into the target once (checked by payload), within 2 s of the
 * last one, and the source keeps nothing of it. */
static void test_dead_letter_queue_across_masters(void **state)
{
    (void)state;
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    assert_true(nm >= 2);
    char src[64], dst[64];
    pick_queue_on(src, sizeof src, "dlq-src", m[0]);
    pick_queue_on(dst, sizeof dst, "dlq-dst", m[1]);
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", e2e_url_encode(src)),
            e2e_fmt("{\"dead_letter_queue\":\"%s\"}", dst));
    expect_json(&r, 200, "put policy");
    long long ids[3];
    for (int i = 0; i < 3; i++) {
        msg_t e = enqueue_to(g_a.port, src, e2e_fmt("{\"payload\":\"death %d\",\"max_retries\":1}", i));
        msg_t c = claim_from(g_a.port, src);
        assert_int_equal(c.id, e.id);
        assert_string_equal(settle(g_a.port, src, &c, "fail", "\"error\":\"boom\"").status, "dead");
        ids[i] = e.id;
    }
    long long t0 = e2e_mono_ms();
    size_t n = 0;
    rd_json_t *list = NULL;
    while (e2e_mono_ms() - t0 < 4000) {
        http_to(g_b.port, &r, "GET", e2e_fmt("/queues/%s/messages?status=pending",
                                             e2e_url_encode(dst)), NULL);
        list = e2e_jget(expect_json(&r, 200, "list target"), "messages");
        n = rd_json_array_size(list);
        if (n >= 3) break;
        e2e_pause_ms(20);
    }
    long long took = e2e_mono_ms() - t0;
    printf("test_cluster: 3 deaths moved across masters in %lld ms\n", took);
    assert_int_equal(n, 3);
    assert_true(took <= 2000);
    for (int i = 0; i < 3; i++) {
        int seen = 0;
        for (size_t j = 0; j < n; j++) {
            rd_json_t *msg = rd_json_array_at(list, j);
            if (strcmp(e2e_jstr(msg, "payload"), e2e_fmt("death %d", i)) != 0) continue;
            seen++;
            assert_int_equal(e2e_jint(e2e_jget(msg, "origin"), "id"), ids[i]);
        }
        assert_int_equal(seen, 1);
    }
    e2e_response_free(&r);
    assert_int_equal(ncmd_int(m[1], "LLEN %s", qkey(dst, "3:ready")), 3);
    assert_int_equal(ncmd_int(m[0], "ZCARD %s", qkey(src, "3:dead")), 0);
    assert_int_equal(ncmd_int(m[0], "ZCARD %s", qkey(src, "3:redriving")), 0);
    assert_int_equal(ncmd_int(m[0], "HGET %s dead_lettered", qkey(src, "stats")), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ncmd_int(m[0], "EXISTS %s", qkey(src, e2e_fmt("m:%lld", ids[i]))), 0);
}

static void *lp_thread(void *arg)
{
    lp_call_t *c = arg;
    e2e_conn_t conn;
    e2e_response_t r = { 0 };
    static const char body[] = "{\"wait_seconds\":5}";
    if (e2e_conn_open(&conn, c->port) != 0) {
        snprintf(c->error, sizeof c->error, "connect: %s", strerror(errno));
        atomic_store(&c->sent, 1);
        return NULL;
    }
    int rc = e2e_send_request(&conn, "POST", c->path, NULL, body, strlen(body));
    atomic_store(&c->sent, 1);
    if (rc != 0 || e2e_read_response(&conn, &r) != 0) {
        snprintf(c->error, sizeof c->error, "no complete response");
    } else {
        c->status = r.status;
        long long n;
        if (r.status == 200 && r.json && rd_json_integer(rd_json_get(r.json, "id"), &n)) c->id = n;
        if (r.status != 200)
            snprintf(c->error, sizeof c->error, "%d: %.120s", r.status, r.body ? r.body : "");
    }
    c->done_us = e2e_mono_us();
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    return NULL;
}

static void test_long_poll_across_masters(void **state)
{
    (void)state;
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    long long worst = 0;
    for (size_t i = 0; i < nm; i++) {
        char q[64];
        pick_queue_on(q, sizeof q, "lp", m[i]);
        for (int run = 0; run < WAKE_RUNS; run++) {
            lp_call_t c;
            memset(&c, 0, sizeof c);
            c.port = g_a.port;
            c.status = -1;
            snprintf(c.path, sizeof c.path, "/queues/%s/claim", q);
            pthread_t t;
            assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
            long long deadline = e2e_mono_ms() + 5000;
            while (!atomic_load(&c.sent) && e2e_mono_ms() < deadline) e2e_pause_ms(2);
            e2e_pause_ms(PARK_MS);
            msg_t e = enqueue_to(g_b.port, q, e2e_fmt("{\"payload\":\"wake %d\"}", run));
            long long enq_us = e2e_mono_us();
            pthread_join(t, NULL);
            if (c.status != 200)
                fail_msg("master :%d run %d: parked claim answered %d %s", m[i]->port, run,
                         c.status, c.error);
            assert_int_equal(c.id, e.id);
            long long lat = c.done_us - enq_us;
            printf("test_cluster: long-poll on master :%d (queue %s) run %d: claim on A "
                   "answered %+.3f ms after B's enqueue\n", m[i]->port, q, run, lat / 1000.0);
            if (lat > worst) worst = lat;
            if (lat >= WAKE_LIMIT_MS * 1000LL)
                fail_msg("master :%d run %d: wake-up took %.1f ms (limit %d ms)", m[i]->port, run,
                         lat / 1000.0, WAKE_LIMIT_MS);
        }
    }
    printf("test_cluster: long-poll across masters: worst %.3f ms over %zu masters x %d runs\n",
           worst / 1000.0, nm, WAKE_RUNS);
}

/* ------------------------------------------------------------------------ */
/* Load threads (no cmocka)                                                 */
/* ------------------------------------------------------------------------ */

/* When an answer came, relative to the event a test causes. */
enum { PHASE_BEFORE, PHASE_DURING, PHASE_AFTER, PHASES };
static const char *const phase_names[PHASES] = { "before", "during", "after" };

typedef struct tally {
    long by_status[600];
    long no_response;
    long unknown_503, unavailable_503;
    long bad;                     /* answers outside the allowed set */
    char first_bad[256];
} tally_t;

typedef struct rec {
    long long id;
    long n;                       /* payload is "<tag>-<worker>-<n>" */
} rec_t;

typedef struct worker {
    pthread_t t;
    int port;
    char queue[64];
    char tag[16];
    int no;
    bool claimer;
    atomic_bool *stop;
    atomic_int *phase;            /* PHASE_*: which tally an answer goes to */
    tally_t enq[PHASES], claim[PHASES], ack[PHASES];
    rec_t *recs;
    size_t nrecs, cap;
} worker_t;

static void tally_add(tally_t *t, int rc, const e2e_response_t *r, const int *allowed,
                      const char *what)
{
    if (rc != 0) {
        t->no_response++;
        if (t->bad++ == 0) snprintf(t->first_bad, sizeof t->first_bad, "%s: no response", what);
        return;
    }
    if (r->status >= 0 && r->status < 600) t->by_status[r->status]++;
    if (r->status == 503) {
        const char *type = r->json ? rd_json_string(rd_json_get(r->json, "type")) : NULL;
        if (type && strcmp(type, "/problems/outcome-unknown") == 0) t->unknown_503++;
        else t->unavailable_503++;
    }
    for (const int *a = allowed; *a; a++)
        if (*a == r->status) return;
    if (t->bad++ == 0)
        snprintf(t->first_bad, sizeof t->first_bad, "%s: %d %.200s", what, r->status,
                 r->body ? r->body : "");
}

static int worker_request(worker_t *w, e2e_conn_t *c, const char *path, const char *body,
                          e2e_response_t *r)
{
    memset(r, 0, sizeof *r);   /* callers pass it uninitialized */
    return e2e_try_request(c, w->port, r, "POST", path, body, strlen(body));
}

static void *worker_main(void *arg)
{
    static const int enq_ok[] = { 201, 503, 0 };
    static const int claim_ok[] = { 200, 204, 503, 0 };
    static const int ack_ok[] = { 200, 503, 0 };
    worker_t *w = arg;
    e2e_conn_t c = { .fd = -1 };
    char path[256], body[256];
    long n = 0;
    while (!atomic_load(w->stop)) {
        e2e_response_t r;
        if (!w->claimer) {
            n++;
            snprintf(path, sizeof path, "/queues/%s/messages", w->queue);
            snprintf(body, sizeof body, "{\"payload\":\"%s-%d-%ld\"}", w->tag, w->no, n);
            int rc = worker_request(w, &c, path, body, &r);
            tally_add(&w->enq[atomic_load(w->phase)], rc, &r, enq_ok, "enqueue");
            long long id;
            if (rc == 0 && r.status == 201 && r.json &&
                rd_json_integer(rd_json_get(r.json, "id"), &id)) {
                if (w->nrecs == w->cap) {
                    w->cap = w->cap ? w->cap * 2 : 4096;
                    w->recs = realloc(w->recs, w->cap * sizeof *w->recs);
                }
                w->recs[w->nrecs++] = (rec_t){ id, n };
            }
            if (rc != 0) e2e_pause_ms(5);
            e2e_response_free(&r);
            continue;
        }
        snprintf(path, sizeof path, "/queues/%s/claim", w->queue);
        int rc = worker_request(w, &c, path, "{\"lease_seconds\":30,\"wait_seconds\":1}", &r);
        tally_add(&w->claim[atomic_load(w->phase)], rc, &r, claim_ok, "claim");
        long long id = 0;
        const char *token = NULL;
        if (rc == 0 && r.status == 200 && r.json) {
            rd_json_integer(rd_json_get(r.json, "id"), &id);
            token = rd_json_string(rd_json_get(r.json, "lease_token"));
        }
        if (id > 0 && token) {
            snprintf(path, sizeof path, "/queues/%s/messages/%lld/succeed", w->queue, id);
            snprintf(body, sizeof body, "{\"lease_token\":\"%s\"}", token);
            e2e_response_t a;
            int arc = worker_request(w, &c, path, body, &a);
            tally_add(&w->ack[atomic_load(w->phase)], arc, &a, ack_ok, "succeed");
            e2e_response_free(&a);
        }
        if (rc != 0) e2e_pause_ms(5);
        e2e_response_free(&r);
    }
    e2e_conn_close(&c);
    return NULL;
}

static int workers_start(worker_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0) {
            atomic_store(w[0].stop, true);
            for (size_t k = 0; k < i; k++) pthread_join(w[k].t, NULL);
            return -1;
        }
    return 0;
}

static void workers_join(worker_t *w, size_t n)
{
    atomic_store(w[0].stop, true);
    for (size_t i = 0; i < n; i++) pthread_join(w[i].t, NULL);
}

static void workers_free(worker_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) free(w[i].recs);
}

static void tally_merge(tally_t *into, const tally_t *t)
{
    for (int s = 0; s < 600; s++) into->by_status[s] += t->by_status[s];
    into->no_response += t->no_response;
    into->unknown_503 += t->unknown_503;
    into->unavailable_503 += t->unavailable_503;
    if (into->bad == 0 && t->bad) snprintf(into->first_bad, sizeof into->first_bad, "%s",
                                           t->first_bad);
    into->bad += t->bad;
}

static void tally_print(const char *label, const char *op, const tally_t *t)
{
    char line[512];
    size_t o = 0;
    for (int s = 0; s < 600; s++)
        if (t->by_status[s])
            o += (size_t)snprintf(line + o, sizeof line - o, " %d:%ld", s, t->by_status[s]);
    if (t->no_response) snprintf(line + o, sizeof line - o, " none:%ld", t->no_response);
    if (o == 0 && t->no_response == 0) snprintf(line, sizeof line, " (none)");
    printf("test_cluster: %s: %-8s%s (503 backend-unavailable %ld, outcome-unknown %ld)\n", label,
           op, line, t->unavailable_503, t->unknown_503);
}

/* Prints per-operation counts for each phase and in all; returns the
 * answers outside the allowed set (first_bad: the first of them). */
static long workers_report(const char *label, worker_t *w, size_t n, char *first_bad,
                           size_t cap)
{
    tally_t all[3];
    memset(all, 0, sizeof all);
    static const char *const ops[3] = { "enqueue", "claim", "succeed" };
    for (int p = 0; p < PHASES; p++) {
        tally_t t[3];
        memset(t, 0, sizeof t);
        for (size_t i = 0; i < n; i++) {
            tally_merge(&t[0], &w[i].enq[p]);
            tally_merge(&t[1], &w[i].claim[p]);
            tally_merge(&t[2], &w[i].ack[p]);
        }
        for (int o = 0; o < 3; o++) {
            tally_print(e2e_fmt("%s (%s)", label, phase_names[p]), ops[o], &t[o]);
            tally_merge(&all[o], &t[o]);
        }
    }
    for (int o = 0; o < 3; o++) tally_print(e2e_fmt("%s (all)", label), ops[o], &all[o]);
    long total_503 = all[0].by_status[503] + all[1].by_status[503] + all[2].by_status[503];
    printf("test_cluster: %s: %ld answers were 503 in all\n", label, total_503);
    first_bad[0] = '\0';
    long bad = 0;
    for (int o = 0; o < 3; o++) {
        if (bad == 0 && all[o].bad) snprintf(first_bad, cap, "%s", all[o].first_bad);
        bad += all[o].bad;
    }
    return bad;
}

/* ------------------------------------------------------------------------ */
/* Checking a queue's data on the node that owns it                         */
/* ------------------------------------------------------------------------ */

typedef struct found {
    char *payload;                /* NULL: no hash for this id */
    char status[16];
    unsigned char indexes;        /* how many indexes hold the id */
    char where[16];               /* the last index that did */
} found_t;

/* What verify_queue counts. */
typedef struct damage {
    long missing;                 /* a 201'd id has no message hash */
    long reused;                  /* a 201'd id holds another enqueue's payload */
    long twice_indexed;           /* an id in two indexes */
    long status_mismatch;         /* index and hash status disagree */
    long unindexed;               /* a hash in no index */
    long dangling;                /* an index member without a hash, or beyond seq */
    long duplicate_payload;       /* one enqueue's payload stored under two ids */
    long lost;                    /* a 201'd payload stored under no id at all */
    long unreadable;              /* the node did not answer */
} damage_t;

static long damage_total(const damage_t *d)
{
    return d->missing + d->reused + d->twice_indexed + d->status_mismatch + d->unindexed +
           d->dangling + d->duplicate_payload + d->lost + d->unreadable;
}

static const char *damage_text(const damage_t *d)
{
    return e2e_fmt("%ld 201'd messages lost (payload stored nowhere), %ld 201'd ids without a "
               "message, %ld 201'd ids holding another payload (id reused), %ld ids in two "
               "indexes, %ld index/status mismatches, %ld messages in no index, %ld index "
               "entries without a message, %ld payloads stored twice%s", d->lost, d->missing,
               d->reused, d->twice_indexed, d->status_mismatch, d->unindexed, d->dangling,
               d->duplicate_payload, d->unreadable ? ", node unreadable" : "");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads every key of q's slot from owner and checks: every 201'd message
 * (recs of enqueuers in w) exists with its payload; no payload twice; every
 * message in exactly one index, with a status that agrees; every index member
 * has a hash. Prints a summary and the first problems; fills *d. */
static void verify_queue(const char *label, cnode_t *owner, const char *q, worker_t *w,
                         size_t nw, damage_t *d)
{
    memset(d, 0, sizeof *d);
    rd_buf_t base = RD_BUF_INIT;
    queue_base(&base, q);
    unsigned slot = rd_cluster_slot(base.data, base.len);
    redisReply *cnt = ncmd(owner, "CLUSTER COUNTKEYSINSLOT %u", slot);
    redisReply *keys = cnt && cnt->type == REDIS_REPLY_INTEGER
                           ? ncmd(owner, "CLUSTER GETKEYSINSLOT %u %lld", slot, cnt->integer + 10)
                           : NULL;
    redisReply *seq = ncmd(owner, "GET %s", qkey(q, "seq"));
    if (keys == NULL || keys->type != REDIS_REPLY_ARRAY || seq == NULL) {
        d->unreadable = 1;
        if (cnt) freeReplyObject(cnt);
        if (keys) freeReplyObject(keys);
        if (seq) freeReplyObject(seq);
        rd_buf_free(&base);
        return;
    }
    long long nkeys = cnt->integer;
    long long seq_value = seq->type == REDIS_REPLY_STRING ? atoll(seq->str) : 0;
    long long max_id = seq_value;
    freeReplyObject(cnt);
    freeReplyObject(seq);
    for (size_t i = 0; i < nw; i++)
        for (size_t k = 0; k < w[i].nrecs; k++)
            if (w[i].recs[k].id > max_id) max_id = w[i].recs[k].id;
    const char *mprefix = e2e_fmt("%s:m:", base.data);
    size_t mlen = strlen(mprefix);
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        if (strncmp(k, mprefix, mlen) == 0 && atoll(k + mlen) > max_id) max_id = atoll(k + mlen);
    }
    found_t *f = calloc((size_t)max_id + 2, sizeof *f);
    long shown = 0;
#define PROBLEM(counter, ...)                                                       \
    do {                                                                            \
        d->counter++;                                                               \
        if (shown++ < MAX_PROBLEMS_SHOWN) {                                         \
            fprintf(stderr, "test_cluster: %s: ", label);                           \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

    /* Messages, pipelined, read with the library's get (the record's layout
     * is the library's, docs/storage.md). mprefix is "<base>:m:". */
    redisContext *c = node_ctx(owner);
    size_t nmsg = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        if (strncmp(k, mprefix, mlen) != 0) continue;
        redisAppendCommand(c, "FCALL_RO %s 2 %b %s %s", RD_FUNCTION("get"), k, mlen - 3, k,
                           k + mlen);
        nmsg++;
    }
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        if (strncmp(k, mprefix, mlen) != 0) continue;
        void *rv = NULL;
        if (redisGetReply(c, &rv) != REDIS_OK || rv == NULL) {
            PROBLEM(unreadable, "HMGET failed: %s", c->errstr);
            break;
        }
        redisReply *r = rv;
        long long id = atoll(k + mlen);
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && id > 0 && id <= max_id &&
            r->element[1]->type == REDIS_REPLY_ARRAY) {
            const redisReply *m = r->element[1];
            for (size_t j = 2; j + 1 < m->elements; j += 2) {
                const char *name = m->element[j]->str, *value = m->element[j + 1]->str;
                if (strcmp(name, "payload") == 0 && f[id].payload == NULL)
                    f[id].payload = strdup(value);
                else if (strcmp(name, "status") == 0)
                    snprintf(f[id].status, sizeof f[id].status, "%s", value);
            }
        }
        freeReplyObject(r);
    }

    /* Indexes. */
    static const struct { const char *suffix; bool list; const char *status; } idx[] = {
        { "3:ready", true, "pending" },        { "3:due", true, "pending" },
        { "3:scheduled", false, "pending" },   { "3:processing", false, "processing" },
        { "3:succeeded", false, "succeeded" }, { "3:dead", false, "dead" },
    };
    long members = 0;
    for (size_t x = 0; x < sizeof idx / sizeof idx[0]; x++) {
        redisReply *r = ncmd(owner, idx[x].list ? "LRANGE %s 0 -1" : "ZRANGE %s 0 -1",
                             qkey(q, idx[x].suffix));
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
            long long id = atoll(r->element[i]->str);
            members++;
            if (id <= 0 || id > max_id) {
                PROBLEM(dangling, "%s holds id %s beyond seq %lld", idx[x].suffix,
                        r->element[i]->str, max_id);
                continue;
            }
            if (f[id].indexes++ > 0)
                PROBLEM(twice_indexed, "id %lld is in both %s and %s", id, f[id].where,
                        idx[x].suffix);
            snprintf(f[id].where, sizeof f[id].where, "%s", idx[x].suffix);
            if (f[id].payload == NULL)
                PROBLEM(dangling, "id %lld is in %s but has no hash", id, idx[x].suffix);
            else if (strcmp(f[id].status, idx[x].status) != 0)
                PROBLEM(status_mismatch, "id %lld is in %s but its status is \"%s\"", id,
                        idx[x].suffix, f[id].status);
        }
        if (r == NULL || r->type != REDIS_REPLY_ARRAY)
            PROBLEM(unreadable, "reading %s failed", idx[x].suffix);
        if (r) freeReplyObject(r);
    }

    /* Every 201'd message, with its payload. */
    size_t acked = 0;
    for (size_t i = 0; i < nw; i++) {
        for (size_t k = 0; k < w[i].nrecs; k++) {
            rec_t *rec = &w[i].recs[k];
            const char *want = e2e_fmt("%s-%d-%ld", w[i].tag, w[i].no, rec->n);
            acked++;
            if (rec->id <= 0 || rec->id > max_id || f[rec->id].payload == NULL)
                PROBLEM(missing, "201'd message id %lld (payload %s) does not exist", rec->id,
                        want);
            else if (strcmp(f[rec->id].payload, want) != 0)
                PROBLEM(reused, "201'd id %lld should hold payload %s but holds %s", rec->id,
                        want, f[rec->id].payload);
        }
    }
    /* Every message in exactly one index; no payload twice. */
    char **payloads = calloc(nmsg + 1, sizeof *payloads);
    size_t np = 0;
    for (long long id = 1; id <= max_id; id++) {
        if (f[id].payload == NULL) continue;
        if (f[id].indexes == 0)
            PROBLEM(unindexed, "id %lld (status %s) is in no index", id, f[id].status);
        if (np < nmsg) payloads[np++] = f[id].payload;
    }
    qsort(payloads, np, sizeof *payloads, cmp_str);
    for (size_t i = 1; i < np; i++)
        if (strcmp(payloads[i], payloads[i - 1]) == 0)
            PROBLEM(duplicate_payload, "payload %s is stored twice", payloads[i]);
    /* Every 201'd payload is stored under some id. */
    for (size_t i = 0; i < nw; i++) {
        for (size_t k = 0; k < w[i].nrecs; k++) {
            const char *want = e2e_fmt("%s-%d-%ld", w[i].tag, w[i].no, w[i].recs[k].n);
            if (np == 0 || bsearch(&want, payloads, np, sizeof *payloads, cmp_str) == NULL)
                PROBLEM(lost, "201'd payload %s (id %lld) is stored nowhere", want,
                        w[i].recs[k].id);
        }
    }
#undef PROBLEM
    printf("test_cluster: %s: slot %u on :%d holds %lld keys, %zu messages (%ld index entries, "
           "seq %lld); %zu enqueues answered 201\n", label, slot, owner->port, nkeys, nmsg,
           members, seq_value, acked);
    printf("test_cluster: %s: %s\n", label, damage_text(d));
    free(payloads);
    for (long long id = 0; id <= max_id + 1; id++) free(f[id].payload);
    free(f);
    freeReplyObject(keys);
    rd_buf_free(&base);
}

/* enqueue, claim, succeed through port, on a fresh connection; 0 when all
 * three answered as they should, else the first status that did not. */
static int roundtrip(int port, const char *q, char *why, size_t cap)
{
    e2e_conn_t c;
    e2e_response_t r = { 0 };
    int result = 0;
    if (e2e_conn_open(&c, port) != 0) {
        snprintf(why, cap, "connect failed");
        return -1;
    }
    const char *steps[3] = { "enqueue", "claim", "succeed" };
    long long id = 0;
    char token[64] = "";
    for (int s = 0; s < 3 && result == 0; s++) {
        const char *path = s == 0 ? e2e_fmt("/queues/%s/messages", q)
                         : s == 1 ? e2e_fmt("/queues/%s/claim", q)
                                  : e2e_fmt("/queues/%s/messages/%lld/succeed", q, id);
        static unsigned serial;
        const char *body = s == 0 ? e2e_fmt("{\"payload\":\"after-%u\"}", ++serial)
                         : s == 1 ? "{\"lease_seconds\":30}"
                                  : e2e_fmt("{\"lease_token\":\"%s\"}", token);
        int want = s == 0 ? 201 : 200;
        if (e2e_request(&c, "POST", path, NULL, body, strlen(body), &r) != 0) {
            snprintf(why, cap, "%s: no response", steps[s]);
            result = -1;
        } else if (r.status != want) {
            snprintf(why, cap, "%s: %d %.150s", steps[s], r.status, r.body);
            result = r.status;
        } else if (s < 2 && r.json) {
            rd_json_integer(rd_json_get(r.json, "id"), &id);
            const char *t = rd_json_string(rd_json_get(r.json, "lease_token"));
            if (t) snprintf(token, sizeof token, "%s", t);
        }
        e2e_response_free(&r);
    }
    e2e_conn_close(&c);
    return result;
}

/* Polls roundtrip until it works (bounded); returns ms waited, or -1. */
static long long recovered_after(int port, const char *q, int timeout_ms, char *why, size_t cap)
{
    long long t0 = e2e_mono_ms();
    do {
        if (roundtrip(port, q, why, cap) == 0) return e2e_mono_ms() - t0;
        e2e_pause_ms(100);
    } while (e2e_mono_ms() - t0 < timeout_ms);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* 4. Failover under load                                                   */
/* ------------------------------------------------------------------------ */

static void test_failover_under_load(void **state)
{
    (void)state;
    cnode_t *m[MAX_NODES];
    masters(m);
    cnode_t *old = m[0];
    char q[64];
    pick_queue_on(q, sizeof q, "fo", old);
    cnode_t *replica = NULL;
    long long deadline = e2e_mono_ms() + 10000;
    while ((replica = replica_of(old)) == NULL && e2e_mono_ms() < deadline) e2e_pause_ms(100);
    if (replica == NULL) fail_msg("master :%d has no replica in sync", old->port);
    printf("test_cluster: failover: queue %s on master :%d, replica :%d\n", q, old->port,
           replica->port);

    /* Take the library off the replica (a brand-new master would not have
     * it either), so that only retryd can put it on the promoted master. */
    redisReply *r = ncmd_ok(replica, "CONFIG SET replica-read-only no");
    freeReplyObject(r);
    r = ncmd_ok(replica, "FUNCTION DELETE " RD_LIBRARY_NAME);
    freeReplyObject(r);
    r = ncmd_ok(replica, "CONFIG SET replica-read-only yes");
    freeReplyObject(r);
    assert_false(has_library(replica));

    atomic_bool stop = false;
    atomic_int phase = PHASE_BEFORE;
    worker_t w[6];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 6; i++) {
        w[i].port = g_a.port;
        snprintf(w[i].queue, sizeof w[i].queue, "%s", q);
        snprintf(w[i].tag, sizeof w[i].tag, "fo");
        w[i].no = i;
        w[i].claimer = i >= 4;
        w[i].stop = &stop;
        w[i].phase = &phase;
    }
    if (workers_start(w, 6) != 0) fail_msg("pthread_create failed");

    /* From here to the join: no cmocka calls, errors are recorded. */
    char err[256] = "";
    e2e_pause_ms(FAILOVER_LOAD_BEFORE_MS);
    long long t0 = e2e_mono_ms(), promoted_ms = -1;
    atomic_store(&phase, PHASE_DURING);
    r = ncmd(replica, "CLUSTER FAILOVER");
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        snprintf(err, sizeof err, "CLUSTER FAILOVER on :%d: %s", replica->port,
                 r ? r->str : "no reply");
    if (r) freeReplyObject(r);
    while (!err[0] && e2e_mono_ms() - t0 < FAILOVER_TIMEOUT_MS) {
        if (node_is_master(replica) && !node_is_master(old)) {
            promoted_ms = e2e_mono_ms() - t0;
            break;
        }
        e2e_pause_ms(20);
    }
    if (!err[0] && promoted_ms < 0)
        snprintf(err, sizeof err, "the replica was not promoted within %d ms",
                 FAILOVER_TIMEOUT_MS);
    atomic_store(&phase, PHASE_AFTER);
    e2e_pause_ms(FAILOVER_LOAD_AFTER_MS);
    workers_join(w, 6);

    char first_bad[256];
    long bad = workers_report("failover", w, 6, first_bad, sizeof first_bad);
    if (err[0]) {
        workers_free(w, 6);
        fail_msg("%s", err);
    }
    printf("test_cluster: failover: :%d promoted %lld ms after CLUSTER FAILOVER\n",
           replica->port, promoted_ms);
    g_promoted = replica;
    g_demoted = old;
    if (load_slot_map(10000) != 0) {
        workers_free(w, 6);
        fail_msg("the nodes did not agree on the slot map after the failover");
    }
    int slot = queue_slot_live(q);
    if (g_slot_owner[slot] != replica) {
        workers_free(w, 6);
        fail_msg("slot %d is owned by :%d, not the promoted :%d", slot, g_slot_owner[slot]->port,
                 replica->port);
    }

    char why[256] = "";
    long long rec_a = roundtrip(g_a.port, q, why, sizeof why) == 0 ? 0 : -1;
    long long rec_b = rec_a == 0 ? (roundtrip(g_b.port, q, why, sizeof why) == 0 ? 0 : -1) : -1;
    long long later = -1;
    if (rec_a != 0 || rec_b != 0) later = recovered_after(g_a.port, q, 15000, why, sizeof why);

    damage_t d;
    verify_queue("failover", replica, q, w, 6, &d);
    workers_free(w, 6);
    if (bad) fail_msg("%ld answers during the failover were not 201/200/204/503; first: %s", bad,
                      first_bad);
    if (rec_a != 0 || rec_b != 0)
        fail_msg("3 s after the failover, enqueue/claim/succeed still failed (%s); %s", why,
                 later >= 0 ? e2e_fmt("it worked %lld ms later", later)
                            : "it never worked in 15 s");
    if (damage_total(&d) != 0) fail_msg("the queue's data on the new master: %s", damage_text(&d));
}

/* ------------------------------------------------------------------------ */
/* 5. The promoted master got the library from retryd                       */
/* ------------------------------------------------------------------------ */

static void test_promoted_master_has_library(void **state)
{
    (void)state;
    if (g_promoted == NULL) fail_msg("the failover test did not promote a replica");
    if (!has_library(g_promoted))
        fail_msg("FUNCTION LIST on the promoted master :%d lacks " RD_LIBRARY_NAME,
                 g_promoted->port);
    /* And every master has it. */
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    for (size_t i = 0; i < nm; i++)
        if (!has_library(m[i]))
            fail_msg("FUNCTION LIST on master :%d lacks " RD_LIBRARY_NAME, m[i]->port);
}

/* Clients of n that look like retryd command links: their last command was
 * one only those links send (FCALL, FUNCTION LOAD, SADD, SMEMBERS, CONFIG
 * GET), and they are not subscribers (the notification link may live on any
 * node). The test's own connection runs CLIENT LIST and so never matches. */
static int command_links_on(cnode_t *n, char *seen, size_t cap)
{
    static const char *const cmds[] = { "fcall", "fcall_ro", "function|load", "sadd",
                                        "smembers", "config|get" };
    redisReply *r = ncmd(n, "CLIENT LIST");
    int count = 0;
    size_t o = 0;
    seen[0] = '\0';
    for (char *line = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        char flags[32] = "", cmd[64] = "", addr[64] = "";
        const char *f = strstr(line, " flags="), *c = strstr(line, " cmd="),
                   *a = strstr(line, " addr=");
        if (f) sscanf(f, " flags=%31s", flags);
        if (c) sscanf(c, " cmd=%63s", cmd);
        if (a) sscanf(a, " addr=%63s", addr);
        bool match = false;
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
            match = match || strcmp(cmd, cmds[i]) == 0;
        if (match && !strchr(flags, 'P') && !strchr(flags, 'M') && !strchr(flags, 'S')) {
            count++;
            if (o < cap) o += (size_t)snprintf(seen + o, cap - o, " %s(cmd=%s)", addr, cmd);
        }
        line = eol ? eol + 1 : NULL;
    }
    if (r) freeReplyObject(r);
    return count;
}

/* docs/cluster.md: "connections to masters that no longer own slots are
 * closed". After the failover the demoted master owns no slot; within one
 * periodic map refresh (10 s) both instances' command links to it go. */
static void test_demoted_master_links_closed(void **state)
{
    (void)state;
    if (g_demoted == NULL) fail_msg("the failover test did not demote a master");
    assert_false(node_is_master(g_demoted));
    char seen[512];
    long long t0 = e2e_mono_ms();
    int links;
    while ((links = command_links_on(g_demoted, seen, sizeof seen)) > 0 &&
           e2e_mono_ms() - t0 < 12000)
        e2e_pause_ms(250);
    printf("test_cluster: demoted master :%d: %d retryd command links after %lld ms%s\n",
           g_demoted->port, links, e2e_mono_ms() - t0, seen);
    if (links > 0)
        fail_msg("12 s after the failover the demoted master :%d (no slots) still has %d retryd "
                 "command link(s):%s", g_demoted->port, links, seen);
}

/* ------------------------------------------------------------------------ */
/* 6. Slot migration under load                                             */
/* ------------------------------------------------------------------------ */

/* Describes, on stderr, a key MIGRATE could not move: its type (and for a
 * string, its value) on both nodes. */
static void describe_busy_key(cnode_t *src, cnode_t *dst, const char *key)
{
    redisReply *ts = ncmd(src, "TYPE %s", key);
    redisReply *a = ncmd(dst, "ASKING");
    redisReply *td = ncmd(dst, "TYPE %s", key);
    char vs[64] = "", vd[64] = "";
    if (ts && ts->type == REDIS_REPLY_STATUS && strcmp(ts->str, "string") == 0) {
        redisReply *g = ncmd(src, "GET %s", key);
        if (g && g->type == REDIS_REPLY_STRING) snprintf(vs, sizeof vs, " = %s", g->str);
        if (g) freeReplyObject(g);
        redisReply *a2 = ncmd(dst, "ASKING");
        if (a2) freeReplyObject(a2);
        g = ncmd(dst, "GET %s", key);
        if (g && g->type == REDIS_REPLY_STRING) snprintf(vd, sizeof vd, " = %s", g->str);
        if (g) freeReplyObject(g);
    }
    fprintf(stderr, "test_cluster: migration: BUSYKEY %s: on the source %s%s, already on the "
            "target %s%s\n", key, ts && ts->str ? ts->str : "?", vs, td && td->str ? td->str : "?",
            vd);
    if (ts) freeReplyObject(ts);
    if (a) freeReplyObject(a);
    if (td) freeReplyObject(td);
}

/* Moves every key of slot from src to dst in batches (MIGRATE ... KEYS).
 * A key the target already holds (BUSYKEY) is reported and counted in
 * *busy, then moved with REPLACE so the migration can finish. Returns 0, or
 * -1 with err set. No cmocka: load threads are running. */
static int migrate_keys(cnode_t *src, cnode_t *dst, unsigned slot, long *moved, long *busy,
                        char *err, size_t cap)
{
    long long t0 = e2e_mono_ms();
    char port[16];
    snprintf(port, sizeof port, "%d", dst->port);
    while (e2e_mono_ms() - t0 < MIGRATE_TIMEOUT_MS) {
        redisReply *keys = ncmd(src, "CLUSTER GETKEYSINSLOT %u %d", slot, MIGRATE_BATCH);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            snprintf(err, cap, "GETKEYSINSLOT on the source failed");
            if (keys) freeReplyObject(keys);
            return -1;
        }
        if (keys->elements == 0) {
            freeReplyObject(keys);
            return 0;
        }
        const char *argv[8 + MIGRATE_BATCH];
        size_t lens[8 + MIGRATE_BATCH];
        int argc = 0;
        bool replace = false;
        for (int attempt = 0; attempt < 2; attempt++) {
            argc = 0;
            argv[argc++] = "MIGRATE";
            argv[argc++] = dst->host;
            argv[argc++] = port;
            argv[argc++] = "";
            argv[argc++] = "0";
            argv[argc++] = "5000";
            if (replace) argv[argc++] = "REPLACE";
            argv[argc++] = "KEYS";
            for (size_t i = 0; i < keys->elements; i++) argv[argc++] = keys->element[i]->str;
            for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
            redisReply *r = ncmd_argv(src, argc, argv, lens);
            if (r && r->type != REDIS_REPLY_ERROR) {
                freeReplyObject(r);
                *moved += (long)keys->elements;
                break;
            }
            if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "BUSYKEY") && !replace) {
                /* Which keys: the ones still on the source that the target has. */
                for (size_t i = 0; i < keys->elements; i++) {
                    redisReply *a = ncmd(dst, "ASKING");
                    redisReply *e = ncmd(dst, "EXISTS %s", keys->element[i]->str);
                    redisReply *s = ncmd(src, "EXISTS %s", keys->element[i]->str);
                    if (e && e->type == REDIS_REPLY_INTEGER && e->integer == 1 && s &&
                        s->type == REDIS_REPLY_INTEGER && s->integer == 1) {
                        if ((*busy)++ < MAX_PROBLEMS_SHOWN)
                            describe_busy_key(src, dst, keys->element[i]->str);
                    }
                    if (a) freeReplyObject(a);
                    if (e) freeReplyObject(e);
                    if (s) freeReplyObject(s);
                }
                freeReplyObject(r);
                replace = true;
                continue;
            }
            snprintf(err, cap, "MIGRATE: %s", r ? r->str : "no reply");
            if (r) freeReplyObject(r);
            freeReplyObject(keys);
            return -1;
        }
        freeReplyObject(keys);
    }
    snprintf(err, cap, "keys still on the source after %d ms", MIGRATE_TIMEOUT_MS);
    return -1;
}

static int setslot(cnode_t *n, unsigned slot, const char *how, const char *id, char *err,
                   size_t cap)
{
    redisReply *r = ncmd(n, "CLUSTER SETSLOT %u %s %s", slot, how, id);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc != 0)
        snprintf(err, cap, "CLUSTER SETSLOT %u %s on :%d: %s", slot, how, n->port,
                 r ? r->str : "no reply");
    if (r) freeReplyObject(r);
    return rc;
}

/* Keys of slot held by node n (its own view, whatever its slot config). */
static long long keys_in_slot(cnode_t *n, unsigned slot)
{
    redisReply *r = ncmd(n, "CLUSTER COUNTKEYSINSLOT %u", slot);
    long long k = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return k;
}

/* GET on the target of a migration (ASKING first), or NULL. */
static char *get_asking(cnode_t *n, const char *key)
{
    redisReply *a = ncmd(n, "ASKING");
    redisReply *g = ncmd(n, "GET %s", key);
    char *v = g && g->type == REDIS_REPLY_STRING ? strdup(g->str) : NULL;
    if (a) freeReplyObject(a);
    if (g) freeReplyObject(g);
    return v;
}

/* Undoes g_unsettled: deletes the target's keys of the slot (they are
 * strays: nothing was migrated) and makes the slot STABLE on both nodes. */
static void settle_slot(void)
{
    if (!g_unsettled.active) return;
    g_unsettled.active = false;
    cnode_t *dst = g_unsettled.dst, *src = g_unsettled.src;
    unsigned slot = g_unsettled.slot;
    for (int round = 0; round < 100 && keys_in_slot(dst, slot) > 0; round++) {
        redisReply *keys = ncmd(dst, "CLUSTER GETKEYSINSLOT %u 100", slot);
        for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
            redisReply *a = ncmd(dst, "ASKING");
            redisReply *d = ncmd(dst, "DEL %s", keys->element[i]->str);
            if (a) freeReplyObject(a);
            if (d) freeReplyObject(d);
        }
        if (keys) freeReplyObject(keys);
    }
    redisReply *r = ncmd(dst, "CLUSTER SETSLOT %u STABLE", slot);
    if (r) freeReplyObject(r);
    r = ncmd(src, "CLUSTER SETSLOT %u STABLE", slot);
    if (r) freeReplyObject(r);
}

/* One request on a fresh connection: status, id (or 0) and problem type. */
typedef struct answer {
    int status;
    long long id;
    char type[64];
    char body[200];
} answer_t;

static answer_t ask(int port, const char *method, const char *path, const char *body)
{
    answer_t a = { .status = -1 };
    e2e_response_t r = { 0 };
    http_to(port, &r, method, path, body);
    a.status = r.status;
    if (r.json) {
        rd_json_integer(rd_json_get(r.json, "id"), &a.id);
        const char *t = rd_json_string(rd_json_get(r.json, "type"));
        if (t) snprintf(a.type, sizeof a.type, "%s", t);
    }
    snprintf(a.body, sizeof a.body, "%s", r.body ? r.body : "");
    e2e_response_free(&r);
    return a;
}

/* The slot is MIGRATING on its owner and IMPORTING on another master, and
 * no key has moved yet: the whole queue is still on the source. Calls made
 * now must not run against the target's empty copy of the queue: an
 * enqueue there restarts the id sequence (ids are reused), a claim there
 * finds nothing although messages are ready. The safe answers are the
 * source's own (not possible while the slot migrates, since the key base
 * KEYS[1] never exists as a key) or 503 (nothing done). */
static void test_calls_while_slot_migrating_stay_on_one_copy(void **state)
{
    (void)state;
    if (load_slot_map(10000) != 0) fail_msg("the nodes do not agree on the slot map");
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    cnode_t *src = m[1 % nm], *dst = m[2 % nm];
    char q[64];
    pick_queue_on(q, sizeof q, "split", src);
    unsigned slot = (unsigned)queue_slot_live(q);
    for (int i = 1; i <= 3; i++) enqueue_to(g_a.port, q, e2e_fmt("{\"payload\":\"before-%d\"}", i));
    msg_t c1 = claim_from(g_a.port, q);
    assert_int_equal(c1.id, 1);
    long long src_keys = keys_in_slot(src, slot);

    g_unsettled.active = true;
    g_unsettled.slot = slot;
    g_unsettled.src = src;
    g_unsettled.dst = dst;
    freeReplyObject(ncmd_ok(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src->id));
    freeReplyObject(ncmd_ok(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst->id));
    printf("test_cluster: slot %u of queue %s MIGRATING on :%d (%lld keys), IMPORTING on :%d; "
           "no key moved\n", slot, q, src->port, src_keys, dst->port);

    answer_t enq = ask(g_a.port, "POST", e2e_fmt("/queues/%s/messages", q),
                       "{\"payload\":\"during\"}");
    answer_t clm = ask(g_a.port, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":30}");
    answer_t get = ask(g_a.port, "GET", e2e_fmt("/queues/%s/messages/2", q), NULL);
    long long dst_keys = keys_in_slot(dst, slot);
    char *dst_seq = get_asking(dst, qkey(q, "seq"));
    long long src_seq = ncmd_int(src, "GET %s", qkey(q, "seq"));
    printf("test_cluster: while migrating: enqueue %d (id %lld) %s, claim %d (id %lld) %s, "
           "get id 2 %d %s; the target now holds %lld keys of the slot (seq %s), the source's "
           "seq is %lld\n", enq.status, enq.id, enq.type, clm.status, clm.id, clm.type,
           get.status, get.type, dst_keys, dst_seq ? dst_seq : "absent", src_seq);
    free(dst_seq);
    settle_slot();

    rd_buf_t msg = RD_BUF_INIT;
    if (enq.status == 201 && enq.id <= 3)
        rd_buf_printf(&msg, "[the enqueue answered 201 with id %lld, an id the queue already "
                      "used (ids 1-3 are on the source)] ", enq.id);
    if (enq.status != 201 && enq.status != 503)
        rd_buf_printf(&msg, "[the enqueue answered %d: %s] ", enq.status, enq.body);
    if (clm.status == 204)
        rd_buf_printf(&msg, "[the claim answered 204 although ids 2 and 3 are ready] ");
    else if (clm.status != 200 && clm.status != 503)
        rd_buf_printf(&msg, "[the claim answered %d: %s] ", clm.status, clm.body);
    if (get.status != 200 && get.status != 503)
        rd_buf_printf(&msg, "[GET of message 2 answered %d: %s] ", get.status, get.body);
    if (dst_keys != 0)
        rd_buf_printf(&msg, "[retryd's calls created %lld keys of the queue on the importing "
                      "node while every key was still on the migrating one] ", dst_keys);
    if (msg.len) {
        char text[2048];
        snprintf(text, sizeof text, "%s", msg.data);
        rd_buf_free(&msg);
        fail_msg("%s", text);
    }
}

/* The slot is MIGRATING on its owner but the other node does not import
 * it, so every call bounces (ASK from the source, MOVED back from the
 * target) until the redirect limit. The call never ran: the answer must be
 * 503 backend-unavailable, not 500 with the raw redirect. */
static void test_redirect_limit_answers_503(void **state)
{
    (void)state;
    if (load_slot_map(10000) != 0) fail_msg("the nodes do not agree on the slot map");
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    cnode_t *src = m[2 % nm], *dst = m[0];
    char q[64];
    pick_queue_on(q, sizeof q, "bounce", src);
    unsigned slot = (unsigned)queue_slot_live(q);
    enqueue_to(g_a.port, q, "{\"payload\":\"one\"}");

    g_unsettled.active = true;
    g_unsettled.slot = slot;
    g_unsettled.src = src;
    g_unsettled.dst = dst;
    freeReplyObject(ncmd_ok(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst->id));
    answer_t enq = ask(g_a.port, "POST", e2e_fmt("/queues/%s/messages", q),
                       "{\"payload\":\"two\"}");
    answer_t get = ask(g_a.port, "GET", e2e_fmt("/queues/%s/messages/99", q), NULL);
    settle_slot();
    printf("test_cluster: redirect loop: enqueue %d %s, get %d %s\n", enq.status, enq.type,
           get.status, get.type);
    if (enq.status != 503 || get.status != 503)
        fail_msg("while every call bounces between ASK and MOVED: enqueue answered %d (%s), GET "
                 "answered %d (%s); want 503 backend-unavailable for both", enq.status, enq.body,
                 get.status, get.body);
    assert_string_equal(enq.type, "/problems/backend-unavailable");
    assert_string_equal(get.type, "/problems/backend-unavailable");
    /* And the queue works again once the slot is stable. */
    char why[256];
    if (recovered_after(g_a.port, q, 5000, why, sizeof why) < 0)
        fail_msg("after SETSLOT STABLE: %s", why);
}

static void test_slot_migration_under_load(void **state)
{
    (void)state;
    if (load_slot_map(10000) != 0) fail_msg("the nodes do not agree on the slot map");
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    assert_true(nm >= 2);
    cnode_t *src = m[nm - 1], *dst = m[0];
    char q[64];
    pick_queue_on(q, sizeof q, "mig", src);
    unsigned slot = (unsigned)queue_slot_live(q);
    printf("test_cluster: migration: queue %s, slot %u, from :%d to :%d\n", q, slot, src->port,
           dst->port);

    /* A backlog to move, and some succeeded and dead messages. */
    worker_t pre = { .no = 9 };
    snprintf(pre.tag, sizeof pre.tag, "mig");
    pre.cap = MIGRATE_PRELOAD;
    pre.recs = calloc(pre.cap, sizeof *pre.recs);
    for (long i = 1; i <= MIGRATE_PRELOAD; i++) {
        msg_t e = enqueue_to(g_a.port, q,
                             e2e_fmt("{\"payload\":\"mig-9-%ld\",\"max_retries\":1}", i));
        pre.recs[pre.nrecs++] = (rec_t){ e.id, i };
    }
    for (int i = 0; i < 20; i++) {
        msg_t c = claim_from(g_a.port, q);
        settle(g_a.port, q, &c, i % 2 ? "succeed" : "fail", i % 2 ? NULL : "\"error\":\"x\"");
    }

    atomic_bool stop = false;
    atomic_int phase = PHASE_BEFORE;
    worker_t w[5];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 4; i++) {
        w[i].port = i % 2 ? g_b.port : g_a.port;
        snprintf(w[i].queue, sizeof w[i].queue, "%s", q);
        snprintf(w[i].tag, sizeof w[i].tag, "mig");
        w[i].no = i;
        w[i].claimer = i >= 2;
        w[i].stop = &stop;
        w[i].phase = &phase;
    }
    if (workers_start(w, 4) != 0) {
        free(pre.recs);
        fail_msg("pthread_create failed");
    }

    /* From here to the join: no cmocka calls. */
    char err[256] = "";
    long moved = 0, busy = 0;
    e2e_pause_ms(300);
    long long t0 = e2e_mono_ms();
    atomic_store(&phase, PHASE_DURING);
    if (setslot(dst, slot, "IMPORTING", src->id, err, sizeof err) == 0 &&
        setslot(src, slot, "MIGRATING", dst->id, err, sizeof err) == 0 &&
        migrate_keys(src, dst, slot, &moved, &busy, err, sizeof err) == 0) {
        /* Target first, then the source, then the other masters. */
        if (setslot(dst, slot, "NODE", dst->id, err, sizeof err) == 0 &&
            setslot(src, slot, "NODE", dst->id, err, sizeof err) == 0)
            for (size_t i = 0; i < nm && !err[0]; i++)
                if (m[i] != src && m[i] != dst) setslot(m[i], slot, "NODE", dst->id, err,
                                                        sizeof err);
    }
    long long took = e2e_mono_ms() - t0;
    atomic_store(&phase, PHASE_AFTER);
    e2e_pause_ms(1000);
    workers_join(w, 4);
    memcpy(&w[4], &pre, sizeof pre);

    printf("test_cluster: migration: %ld keys moved in %lld ms; %ld keys were already on the "
           "target (BUSYKEY)\n", moved, took, busy);
    char first_bad[256];
    long bad = workers_report("migration", w, 4, first_bad, sizeof first_bad);
    if (err[0]) {
        workers_free(w, 5);
        fail_msg("migration: %s", err);
    }
    if (load_slot_map(10000) != 0 || g_slot_owner[slot] != dst) {
        workers_free(w, 5);
        fail_msg("after SETSLOT NODE the nodes do not agree that :%d owns slot %u", dst->port,
                 slot);
    }
    long left = ncmd_int(src, "CLUSTER COUNTKEYSINSLOT %s", e2e_fmt("%u", slot));

    char why[256] = "";
    long long rec = roundtrip(g_a.port, q, why, sizeof why) == 0 ? 0 : -1;
    if (rec == 0) rec = roundtrip(g_b.port, q, why, sizeof why) == 0 ? 0 : -1;
    long long later = rec == 0 ? 0 : recovered_after(g_a.port, q, 15000, why, sizeof why);
    damage_t d;
    verify_queue("migration", dst, q, w, 5, &d);
    workers_free(w, 5);

    /* Every failed condition in one message. */
    rd_buf_t msg = RD_BUF_INIT;
    if (busy)
        rd_buf_printf(&msg, "[%ld keys of slot %u were created on the target while the slot "
                      "was migrating, so MIGRATE answered BUSYKEY for them (they were then "
                      "moved with REPLACE)] ", busy, slot);
    if (damage_total(&d)) rd_buf_printf(&msg, "[the queue's data afterwards: %s] ",
                                        damage_text(&d));
    if (left) rd_buf_printf(&msg, "[%ld keys left on the source] ", left);
    if (bad) rd_buf_printf(&msg, "[%ld answers were not 201/200/204/503; first: %s] ", bad,
                           first_bad);
    if (rec != 0)
        rd_buf_printf(&msg, "[after the migration enqueue/claim/succeed failed (%s); %s] ", why,
                      later >= 0 ? e2e_fmt("it worked %lld ms later", later)
                                 : "it never worked in 15 s");
    if (msg.len) {
        char text[2048];
        snprintf(text, sizeof text, "%s", msg.data);
        rd_buf_free(&msg);
        fail_msg("migration: %s", text);
    }
    assert_int_equal(ncmd_int(dst, "EXISTS %s", qkey(q, "seq")), 1);
}

/* ======================================================================== */

/* ------------------------------------------------------------------------ */
/* 10. Alert webhooks from every master                                     */
/* ------------------------------------------------------------------------ */

static void test_alerts_from_every_master(void **state)
{
    (void)state;
    /* A and B, started without --alert-url, make way for two alerting
     * instances C and D (A and B would only hand their finds over). */
    assert_int_equal(e2e_daemon_stop(&g_a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(e2e_daemon_stop(&g_b, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(recv_start(), 0);
    recv_reset(RECV_OK);
    e2e_daemon_t d[2] = { { 0 }, { 0 } };
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", g_recv.port);
    for (size_t i = 0; i < 2; i++) {
        e2e_flags_t f;
        e2e_flags(&f, "--redis-cluster", g_seeds, g_prefix, TICK_MS, "warn", "--alert-url", url,
                  "--alert-claim-ms", "2000", NULL);
        if (e2e_daemon_spawn(&d[i], g_bin, f.argv) != 0 ||
            e2e_daemon_wait_status(&d[i], "/readyz", 200, READY_TIMEOUT_MS) != 0) {
            for (size_t k = 0; k <= i; k++) e2e_daemon_stop(&d[k], SIGKILL, E2E_STOP_TIMEOUT_MS);
            recv_stop();
            fail_msg("an alerting retryd did not become ready");
        }
    }
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    char queues[MAX_NODES][64];
    long long ids[MAX_NODES];
    for (size_t i = 0; i < nm; i++) {
        int port = d[i % 2].port;
        pick_queue_on(queues[i], sizeof queues[i], "alert", m[i]);
        msg_t e = enqueue_to(port, queues[i], "{\"payload\":\"p\",\"max_retries\":1}");
        msg_t claimed = claim_from(port, queues[i]);
        assert_int_equal(claimed.id, e.id);
        msg_t dead = settle(port, queues[i], &claimed, "fail", "\"error\":\"boom\"");
        assert_string_equal(dead.status, "dead");
        ids[i] = e.id;
    }
    for (size_t i = 0; i < nm; i++) {
        WAIT_FOR(recv_count(queues[i], ids[i]) == 1, 20000,
                 "queue %s on master :%d: its death was not delivered", queues[i], m[i]->port);
        long long pending = -1;
        for (long long deadline = e2e_mono_ms() + 20000; e2e_mono_ms() < deadline;) {
            redisReply *r = ncmd(m[i], "XPENDING %s retryd-alerts", qkey(queues[i], "events"));
            pending = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0
                          ? r->element[0]->integer : -1;
            if (r) freeReplyObject(r);
            if (pending == 0) break;
            e2e_pause_ms(20);
        }
        if (pending != 0) fail_msg("queue %s: %lld alerts pending", queues[i], pending);
    }
    int total = 0;
    for (size_t i = 0; i < nm; i++) total += recv_count(queues[i], 0);
    printf("test_cluster: %d deaths on %zu masters delivered once each\n", total, nm);
    assert_int_equal(total, (int)nm);
    int s0 = e2e_daemon_stop(&d[0], SIGTERM, E2E_STOP_TIMEOUT_MS);
    int s1 = e2e_daemon_stop(&d[1], SIGTERM, E2E_STOP_TIMEOUT_MS);
    recv_stop();
    assert_int_equal(s0, 0);
    assert_int_equal(s1, 0);
}

/* ------------------------------------------------------------------------ */
/* 10. Readiness after start: a master that joins the map later             */
/* ------------------------------------------------------------------------ */

/* /readyz waits at start for every master's first connect attempt; after
 * that it stays 200 while any master answers. A failover promotes a replica
 * retryd has no link to: it is SIGSTOPped right after its promotion, so the
 * new link's handshake hangs (the kernel accepts the connect), and an enqueue
 * for its slots makes retryd learn the new map. While that handshake hangs
 * /readyz must stay 200 (it was 503 until the handshake ended). The stop
 * stays under the cluster's node timeout (2 s): no second failover. */
/* Asks /readyz every 20 ms until ms have passed since t0: *answered counts
 * the answers, *with the ones of status `status`. */
static void poll_readyz(int port, long long t0, int ms, int status, int *answered, int *with)
{
    *answered = *with = 0;
    while (e2e_mono_ms() - t0 < ms) {
        int st = e2e_status_once(port, "GET", "/readyz");
        if (st > 0) (*answered)++;
        if (st == status) (*with)++;
        e2e_pause_ms(20);
    }
}

/* /readyz asks every ready master and the first answer wins: one master
 * that stops answering (whichever a keyless PING used to go to: the first
 * ready master in the daemon's list) must not turn it 503. Each master is
 * stopped in turn, so the test does not depend on that order. */
static void test_ready_while_one_master_hangs(void **state)
{
    (void)state;
    enum { STOPPED_MS = 800 };
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s-hangs", g_prefix);
    e2e_daemon_t d = { 0 };
    e2e_flags_t f;
    e2e_flags(&f, "--redis-cluster", g_seeds, prefix, TICK_MS, "warn", "--redis-timeout-ms",
              "8000", NULL);
    if (e2e_daemon_spawn(&d, g_bin, f.argv) != 0) fail_msg("cannot start retryd");
    if (e2e_daemon_wait_status(&d, "/readyz", 200, READY_TIMEOUT_MS) != 0) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("retryd did not become ready");
    }
    cnode_t *m[MAX_NODES];
    size_t nm = masters(m);
    int bad_port = 0, bad_answered = 0, bad_ok = 0;
    for (size_t i = 0; i < nm && bad_port == 0; i++) {
        pid_t pid = node_pid(m[i]);
        if (pid <= 0) {
            e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
            fail_msg("no process_id for master :%d", m[i]->port);
        }
        redisFree(m[i]->ctx);     /* the test's own link would stall too */
        m[i]->ctx = NULL;
        assert_int_equal(kill(pid, SIGSTOP), 0);
        g_stopped_pid = pid;
        int answered, ok;
        poll_readyz(d.port, e2e_mono_ms(), STOPPED_MS, 200, &answered, &ok);
        kill(pid, SIGCONT);
        g_stopped_pid = 0;
        printf("test_cluster: /readyz answered %d times while master :%d was stopped, %d of "
               "them 200\n", answered, m[i]->port, ok);
        if (answered < 10 || ok != answered) {
            bad_port = m[i]->port;
            bad_answered = answered;
            bad_ok = ok;
        }
    }
    int stopped = e2e_daemon_stop(&d, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (load_slot_map(10000) != 0) fail_msg("the nodes did not agree on the slot map");
    if (bad_port != 0)
        fail_msg("/readyz: %d answers in %d ms, %d of them 200, while master :%d hung",
                 bad_answered, STOPPED_MS, bad_ok, bad_port);
    assert_int_equal(stopped, 0);
}

static void test_ready_stays_after_start(void **state)
{
    (void)state;
    enum { STOPPED_MS = 1200 };
    const char *last_seed = strrchr(g_seeds, ',');
    int control_port = last_seed ? atoi(strrchr(last_seed, ':') + 1) : 0;
    /* A prefix of its own: the earlier tests' queues would have this daemon's
     * timer tick the old master, whose MOVED links the promoted one before
     * it is stopped. */
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s-latched", g_prefix);
    e2e_daemon_t d = { 0 };
    e2e_flags_t f;
    e2e_flags(&f, "--redis-cluster", g_seeds, prefix, TICK_MS, "warn", "--redis-timeout-ms",
              "8000", NULL);
    if (e2e_daemon_spawn(&d, g_bin, f.argv) != 0) fail_msg("cannot start retryd");
    if (e2e_daemon_wait_status(&d, "/readyz", 200, READY_TIMEOUT_MS) != 0) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("retryd did not become ready");
    }
    cnode_t *m[MAX_NODES], *old = NULL, *replica = NULL;
    size_t nm = masters(m);
    long long deadline = e2e_mono_ms() + 10000;
    for (size_t i = 0; i < nm && replica == NULL; i++) {
        if (m[i]->port == control_port || m[i] == g_slot_owner[registry_slot_of(prefix)]) continue;
        old = m[i];
        while ((replica = replica_of(old)) == NULL && e2e_mono_ms() < deadline) e2e_pause_ms(100);
    }
    if (replica == NULL) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("no master with a replica in sync");
    }
    char q[64];
    pick_queue_on(q, sizeof q, "latched", old);
    msg_t before = enqueue_to(d.port, q, "{\"payload\":\"before\"}");
    assert_string_equal(before.status, "pending");

    redisReply *r = ncmd(replica, "CLUSTER FAILOVER");
    bool asked = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    long long t0 = e2e_mono_ms();
    bool promoted = false;
    while (asked && !promoted && e2e_mono_ms() - t0 < FAILOVER_TIMEOUT_MS) {
        promoted = node_is_master(replica) && !node_is_master(old);
        if (!promoted) e2e_pause_ms(20);
    }
    pid_t pid = promoted ? node_pid(replica) : 0;
    if (pid <= 0) {
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("the replica :%d was not promoted (or has no process_id)", replica->port);
    }
    g_promoted = replica;
    g_demoted = old;
    redisFree(replica->ctx);      /* the test's own link would stall too */
    replica->ctx = NULL;
    assert_int_equal(kill(pid, SIGSTOP), 0);
    g_stopped_pid = pid;
    t0 = e2e_mono_ms();
    /* The old master answers MOVED: retryd asks for the map and links the
     * promoted one, whose handshake hangs. */
    e2e_conn_t moved = { .fd = -1 };
    if (e2e_conn_open(&moved, d.port) != 0 ||
        e2e_send_request(&moved, "POST", e2e_fmt("/queues/%s/messages", e2e_url_encode(q)), NULL,
                         "{\"payload\":\"moved\"}", 19) != 0) {
        kill(pid, SIGCONT);
        g_stopped_pid = 0;
        e2e_daemon_stop(&d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        fail_msg("cannot send the enqueue");
    }
    int answered, not_ready;
    poll_readyz(d.port, t0, STOPPED_MS, 503, &answered, &not_ready);
    kill(pid, SIGCONT);
    g_stopped_pid = 0;
    printf("test_cluster: /readyz answered %d times while the promoted :%d was stopped, %d of "
           "them 503\n", answered, replica->port, not_ready);
    e2e_response_t resp = { 0 };
    int moved_status = e2e_read_response(&moved, &resp) == 0 ? resp.status : -1;
    e2e_response_free(&resp);
    e2e_conn_close(&moved);
    int stopped = e2e_daemon_stop(&d, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (load_slot_map(10000) != 0) fail_msg("the nodes did not agree on the slot map");
    if (answered == 0) fail_msg("retryd did not answer /readyz while the master was stopped");
    if (not_ready > 0)
        fail_msg("/readyz was 503 %d of %d times after start while one new master's handshake "
                 "hung", not_ready, answered);
    if (moved_status != 201) fail_msg("the enqueue for the promoted master's slots: %d",
                                      moved_status);
    assert_int_equal(stopped, 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_slot_known_values),
        cmocka_unit_test(test_command_slot_fcall_and_keys),
        cmocka_unit_test(test_command_slot_fcall_without_keys),
    };
#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)
    const struct CMUnitTest live[] = {
        T(test_slot_matches_cluster_keyslot),
        T(test_ready_waits_for_every_master),
        T(test_queues_on_every_master_end_to_end),
        T(test_long_poll_across_masters),
        T(test_redrive_across_masters),
        T(test_dead_letter_queue_across_masters),
        T(test_failover_under_load),
        T(test_promoted_master_has_library),
        T(test_demoted_master_links_closed),
        T(test_calls_while_slot_migrating_stay_on_one_copy),
        T(test_redirect_limit_answers_503),
        T(test_slot_migration_under_load),
        T(test_alerts_from_every_master),
        T(test_ready_while_one_master_hangs),
        T(test_ready_stays_after_start),
    };
#undef T
    int failed = cmocka_run_group_tests_name("cluster-unit", unit, NULL, NULL);
    failed += cmocka_run_group_tests_name("cluster", live, group_setup, group_teardown);
    return failed ? 1 : 0;
}
