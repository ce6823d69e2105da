/* cluster_support.h - the live cluster of test_cluster.c's group "cluster":
 * its state, starting and stopping it on every way out (group teardown, a
 * setup that fails half way, an atexit hook, SIGINT/SIGTERM), talking to the
 * nodes from the main thread, queue names and keys, the daemons A and B with
 * the group setup and teardown, and HTTP from the main thread. Included by
 * test_cluster.c only (moved out to keep that file under 100 KB); it
 * includes cmocka.h itself. */

#ifndef RETRYD_CLUSTER_SUPPORT_H
#define RETRYD_CLUSTER_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "alert_receiver.h"
#include "e2e_support.h"
#include "retryd/buf.h"
#include "retryd/cluster.h"
#include "retryd/keys.h"

enum {
    SLOTS = 16384,
    MAX_NODES = 16,
    MAX_PIDS = 32,
    READY_TIMEOUT_MS = 20000,
    TICK_MS = 50,
    WAKE_RUNS = 5,                /* long-poll runs per master */
    WAKE_LIMIT_MS = 500,
    PARK_MS = 200,                /* time given to a claim to park (only delays) */
    FAILOVER_LOAD_BEFORE_MS = 1000,
    FAILOVER_LOAD_AFTER_MS = 3000,
    FAILOVER_TIMEOUT_MS = 15000,
    MIGRATE_PRELOAD = 400,        /* messages in the queue before its slot moves */
    MIGRATE_BATCH = 10,           /* keys per MIGRATE, as redis-cli --cluster does */
    MIGRATE_TIMEOUT_MS = 20000,
    MAX_PROBLEMS_SHOWN = 20,
};

/* ------------------------------------------------------------------------ */
/* Small strings                                                            */
/* ------------------------------------------------------------------------ */

/* Printable form of binary bytes, for failure reports. */
static inline const char *show_bytes(const char *s, size_t len)
{
    static char ring[4][512];
    static unsigned next;
    char *out = ring[next++ % 4];
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < sizeof ring[0]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

/* ======================================================================== */
/* Group 1: no network                                                      */
/* ======================================================================== */

static inline unsigned slot_of(const char *s)
{
    return rd_cluster_slot(s, strlen(s));
}

static inline int cmd_slot(int argc, ...)
{
    const char *argv[16];
    size_t lens[16];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc && i < 16; i++) {
        argv[i] = va_arg(ap, const char *);
        lens[i] = strlen(argv[i]);
    }
    va_end(ap);
    return rd_cluster_command_slot(argc, argv, lens);
}

/* ======================================================================== */
/* Group 2: a live cluster                                                  */
/* ======================================================================== */

typedef struct cnode {
    char id[48];                  /* CLUSTER MYID */
    char host[64];
    int port;
    redisContext *ctx;            /* the test's own connection, NULL until used */
} cnode_t;

static const char *g_bin;
static char g_tmp[256];           /* mkdtemp'd; the cluster lives in g_tmp/c */
static char g_cluster_dir[300];
static bool g_cluster_up;
static pid_t g_cluster_pids[MAX_PIDS];
static volatile sig_atomic_t g_npids;
static char g_seeds[1024];
static cnode_t g_nodes[MAX_NODES];
static size_t g_nnodes;
static cnode_t *g_slot_owner[SLOTS];
static char g_prefix[64];
static e2e_daemon_t g_a, g_b;
static e2e_conn_t g_conns[2];
static cnode_t *g_promoted;       /* the replica promoted by the failover test */
static cnode_t *g_demoted;        /* the master it replaced */

/* A slot a test left MIGRATING/IMPORTING: test_teardown deletes what the
 * target holds of it and makes it STABLE again, even when the test failed. */
static struct {
    bool active;
    unsigned slot;
    cnode_t *src, *dst;
} g_unsettled;

static inline const char *cluster_script(void)
{
    const char *s = getenv("RETRYD_CLUSTER_SH");
    return s && s[0] ? s : "scripts/cluster.sh";
}

/* ------------------------------------------------------------------------ */
/* Stopping the cluster on every way out                                    */
/* ------------------------------------------------------------------------ */

static inline void cluster_stop(void)
{
    if (!g_cluster_up) return;
    g_cluster_up = false;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s stop '%s' >/dev/null 2>&1", cluster_script(), g_cluster_dir);
    if (system(cmd) != 0) {
        for (int i = 0; i < g_npids; i++) kill(g_cluster_pids[i], SIGKILL);
    }
    g_npids = 0;
    if (g_tmp[0]) rmdir(g_tmp);
}

/* Only async-signal-safe calls: the node pids we read after starting. */
static inline void on_fatal_signal(int sig)
{
    for (int i = 0; i < g_npids; i++) kill(g_cluster_pids[i], SIGKILL);
    if (g_a.pid > 0) kill(g_a.pid, SIGKILL);
    if (g_b.pid > 0) kill(g_b.pid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void at_exit_cleanup(void)
{
    if (g_a.pid > 0) e2e_daemon_stop(&g_a, SIGKILL, 1000);
    if (g_b.pid > 0) e2e_daemon_stop(&g_b, SIGKILL, 1000);
    cluster_stop();
}

/* Starts 3 masters with 1 replica each; fills g_seeds and the node table. */
static inline int cluster_start(void)
{
    snprintf(g_tmp, sizeof g_tmp, "%s/retryd-cluster.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(g_tmp) == NULL) {
        fprintf(stderr, "test_cluster: mkdtemp: %s\n", strerror(errno));
        g_tmp[0] = '\0';
        return -1;
    }
    snprintf(g_cluster_dir, sizeof g_cluster_dir, "%s/c", g_tmp);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s start '%s' 3 1", cluster_script(), g_cluster_dir);
    long long t0 = e2e_mono_ms();
    g_cluster_up = true;          /* from here on, stop it whatever happens */
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
        fprintf(stderr, "test_cluster: popen %s: %s\n", cmd, strerror(errno));
        return -1;
    }
    if (fgets(g_seeds, sizeof g_seeds, p) == NULL) g_seeds[0] = '\0';
    int rc = pclose(p);
    g_seeds[strcspn(g_seeds, "\r\n")] = '\0';

    FILE *pf = fopen(e2e_fmt("%s/pids", g_cluster_dir), "r");
    long pid;
    while (pf && g_npids < MAX_PIDS && fscanf(pf, "%ld", &pid) == 1)
        g_cluster_pids[g_npids++] = (pid_t)pid;
    if (pf) fclose(pf);
    if (rc != 0 || g_seeds[0] == '\0') {
        fprintf(stderr, "test_cluster: '%s' failed (status %d) - is it run from the "
                "repository root? (RETRYD_CLUSTER_SH overrides the path)\n", cmd, rc);
        return -1;
    }
    for (const char *s = g_seeds; *s && g_nnodes < MAX_NODES;) {
        size_t len = strcspn(s, ",");
        const char *colon = memrchr(s, ':', len);
        if (colon == NULL) return -1;
        cnode_t *n = &g_nodes[g_nnodes++];
        snprintf(n->host, sizeof n->host, "%.*s", (int)(colon - s), s);
        n->port = atoi(colon + 1);
        s += len;
        if (*s == ',') s++;
    }
    printf("test_cluster: cluster of %zu nodes up in %lld ms: %s\n", g_nnodes,
           e2e_mono_ms() - t0, g_seeds);
    fflush(stdout);
    return g_nnodes == 6 ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Talking to the nodes (main thread only)                                  */
/* ------------------------------------------------------------------------ */

static inline redisContext *node_ctx(cnode_t *n)
{
    if (n->ctx && n->ctx->err) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
    if (n->ctx == NULL) n->ctx = e2e_redis_connect(n->host, n->port, 5);
    return n->ctx;
}

/* A reply, or NULL when the node could not be reached (never fails the test:
 * callers may run while worker threads are alive). */
static inline redisReply *ncmd(cnode_t *n, const char *format, ...)
{
    redisContext *c = node_ctx(n);
    if (c == NULL) return NULL;
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(c, format, ap);
    va_end(ap);
    return r;
}

static inline redisReply *ncmd_argv(cnode_t *n, int argc, const char **argv, const size_t *lens)
{
    redisContext *c = node_ctx(n);
    return c ? redisCommandArgv(c, argc, argv, lens) : NULL;
}

/* As ncmd, but a NULL or error reply fails the test. */
static inline redisReply *ncmd_ok(cnode_t *n, const char *format, ...)
{
    redisContext *c = node_ctx(n);
    if (c == NULL) fail_msg("cannot connect to node %s:%d", n->host, n->port);
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(c, format, ap);
    va_end(ap);
    if (r == NULL) fail_msg("node :%d: %s: %s", n->port, format, c->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
        char err[256];
        snprintf(err, sizeof err, "%s", r->str);
        freeReplyObject(r);
        fail_msg("node :%d: %s: %s", n->port, format, err);
    }
    return r;
}

static inline long long ncmd_int(cnode_t *n, const char *format, const char *arg)
{
    redisReply *r = ncmd_ok(n, format, arg);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    freeReplyObject(r);
    return v;
}

static inline cnode_t *node_by_port(int port)
{
    for (size_t i = 0; i < g_nnodes; i++)
        if (g_nodes[i].port == port) return &g_nodes[i];
    return NULL;
}

static inline cnode_t *node_by_id(const char *id, size_t len)
{
    for (size_t i = 0; i < g_nnodes; i++)
        if (strlen(g_nodes[i].id) == len && memcmp(g_nodes[i].id, id, len) == 0)
            return &g_nodes[i];
    return NULL;
}

/* "master" or "slave" from ROLE; false when unreachable. */
static inline bool node_is_master(cnode_t *n)
{
    redisReply *r = ncmd(n, "ROLE");
    bool m = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (r) freeReplyObject(r);
    return m;
}

/* The master of replica n (from CLUSTER NODES on n), or NULL. */
static inline cnode_t *master_of(cnode_t *n)
{
    redisReply *r = ncmd(n, "CLUSTER NODES");
    cnode_t *m = NULL;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (char *line = r->str; line && *line;) {
            char *eol = strchr(line, '\n');
            if (strncmp(line, n->id, strlen(n->id)) == 0) {
                char id[64], addr[128], flags[128], master[64];
                if (sscanf(line, "%63s %127s %127s %63s", id, addr, flags, master) == 4 &&
                    strcmp(master, "-") != 0)
                    m = node_by_id(master, strlen(master));
            }
            line = eol ? eol + 1 : NULL;
        }
    }
    if (r) freeReplyObject(r);
    return m;
}

/* The replica of master m that is in sync (master_link_status:up), or NULL. */
static inline cnode_t *replica_of(cnode_t *m)
{
    for (size_t i = 0; i < g_nnodes; i++) {
        cnode_t *n = &g_nodes[i];
        if (n == m || node_is_master(n) || master_of(n) != m) continue;
        redisReply *r = ncmd(n, "INFO replication");
        bool up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
        if (r) freeReplyObject(r);
        if (up) return n;
    }
    return NULL;
}

/* Fills owner[] from CLUSTER SLOTS as node n sees it. Returns 0 or -1. */
static inline int slots_seen_by(cnode_t *n, cnode_t *owner[SLOTS])
{
    memset(owner, 0, sizeof(cnode_t *) * SLOTS);
    redisReply *r = ncmd(n, "CLUSTER SLOTS");
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *range = r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
        redisReply *m = range->element[2];
        cnode_t *node = m->type == REDIS_REPLY_ARRAY && m->elements >= 2
                            ? node_by_port((int)m->element[1]->integer) : NULL;
        for (long long s = range->element[0]->integer; node && s <= range->element[1]->integer &&
                                                       s < SLOTS; s++)
            owner[s] = node;
    }
    freeReplyObject(r);
    return 0;
}

/* Loads g_slot_owner once every node agrees on every slot (bounded). */
static inline int load_slot_map(int timeout_ms)
{
    static cnode_t *other[SLOTS];
    long long deadline = e2e_mono_ms() + timeout_ms;
    do {
        bool agreed = slots_seen_by(&g_nodes[0], g_slot_owner) == 0;
        for (int s = 0; agreed && s < SLOTS; s++) agreed = g_slot_owner[s] != NULL;
        for (size_t i = 1; agreed && i < g_nnodes; i++)
            agreed = slots_seen_by(&g_nodes[i], other) == 0 &&
                     memcmp(other, g_slot_owner, sizeof other) == 0;
        if (agreed) return 0;
        e2e_pause_ms(50);
    } while (e2e_mono_ms() < deadline);
    return -1;
}

/* The distinct masters of the slot map, in order of their first slot. */
static inline size_t masters(cnode_t *out[MAX_NODES])
{
    size_t n = 0;
    for (int s = 0; s < SLOTS; s++) {
        cnode_t *o = g_slot_owner[s];
        bool seen = false;
        for (size_t i = 0; i < n; i++) seen = seen || out[i] == o;
        if (o && !seen && n < MAX_NODES) out[n++] = o;
    }
    return n;
}

/* CLUSTER KEYSLOT as a node computes it; -1 when it did not answer. */
static inline long long live_keyslot(const char *key, size_t len)
{
    const char *argv[] = { "CLUSTER", "KEYSLOT", key };
    size_t lens[] = { 7, 7, len };
    redisReply *r = ncmd_argv(&g_nodes[0], 3, argv, lens);
    long long s = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Queue names and keys                                                     */
/* ------------------------------------------------------------------------ */

/* "<prefix>:{<escaped q>}" into out (rd_buf, free with rd_buf_free). */
static inline void queue_base(rd_buf_t *out, const char *q)
{
    rd_keys_queue_base(out, g_prefix, q, strlen(q));
}

static inline const char *qkey(const char *q, const char *suffix)
{
    rd_buf_t b = RD_BUF_INIT;
    queue_base(&b, q);
    const char *k = e2e_fmt("%s:%s", b.data, suffix);
    rd_buf_free(&b);
    return k;
}

static inline int queue_slot_live(const char *q)
{
    rd_buf_t b = RD_BUF_INIT;
    queue_base(&b, q);
    long long s = live_keyslot(b.data, b.len);
    rd_buf_free(&b);
    return (int)s;
}

static inline int registry_slot_of(const char *prefix)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_registry(&b, prefix);
    int s = (int)rd_cluster_slot(b.data, b.len);
    rd_buf_free(&b);
    return s;
}

static inline int registry_slot(void)
{
    return registry_slot_of(g_prefix);
}

/* A fresh queue name "<tag>-<n>" whose slot (CLUSTER KEYSLOT of its key
 * base) is owned by master m and differs from the registry's slot. */
static inline void pick_queue_on(char *out, size_t cap, const char *tag, const cnode_t *m)
{
    static unsigned serial;
    for (int tries = 0; tries < 5000; tries++) {
        snprintf(out, cap, "%s-%u", tag, ++serial);
        int s = queue_slot_live(out);
        if (s < 0) fail_msg("CLUSTER KEYSLOT did not answer");
        if (g_slot_owner[s] == m && s != registry_slot()) return;
    }
    fail_msg("no queue name with tag %s lands on master :%d", tag, m->port);
}

/* ------------------------------------------------------------------------ */
/* Daemons                                                                  */
/* ------------------------------------------------------------------------ */

static inline int start_daemon(e2e_daemon_t *d, const char *name)
{
    e2e_flags_t f;
    e2e_flags(&f, "--redis-cluster", g_seeds, g_prefix, TICK_MS, "warn", NULL);
    long long t0 = e2e_mono_ms();
    if (e2e_daemon_spawn(d, g_bin, f.argv) != 0) return -1;
    if (e2e_daemon_wait_status(d, "/readyz", 200, READY_TIMEOUT_MS) != 0) {
        fprintf(stderr, "test_cluster: retryd %s on port %d did not become ready in %d ms\n",
                name, d->port, READY_TIMEOUT_MS);
        e2e_daemon_stop(d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        return -1;
    }
    printf("test_cluster: retryd %s on :%d ready after %lld ms\n", name, d->port,
           e2e_mono_ms() - t0);
    return 0;
}

static inline void check_still_running(e2e_daemon_t *d, const char *name)
{
    int wstatus;
    if (!e2e_daemon_exited(d, &wstatus)) return;
    fprintf(stderr, "test_cluster: retryd %s exited by itself (%s %d)\n", name,
            WIFEXITED(wstatus) ? "status" : "signal",
            WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
}

static inline int group_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < 2; i++) e2e_conn_close(&g_conns[i]);
    int sa = g_a.pid > 0 ? e2e_daemon_stop(&g_a, SIGTERM, E2E_STOP_TIMEOUT_MS) : 0;
    int sb = g_b.pid > 0 ? e2e_daemon_stop(&g_b, SIGTERM, E2E_STOP_TIMEOUT_MS) : 0;
    for (size_t i = 0; i < g_nnodes; i++) {
        if (g_nodes[i].ctx) redisFree(g_nodes[i].ctx);
        g_nodes[i].ctx = NULL;
    }
    cluster_stop();
    return e2e_pair_stopped("test_cluster", sa, sb);
}

static inline int group_setup(void **state)
{
    rd_alloc_init();
    g_bin = getenv("RETRYD_BIN");
    if (g_bin == NULL || access(g_bin, X_OK) != 0) {
        fprintf(stderr, "test_cluster: RETRYD_BIN must name build/retryd\n");
        return -1;
    }
    g_conns[0].fd = g_conns[1].fd = -1;
    atexit(at_exit_cleanup);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    snprintf(g_prefix, sizeof g_prefix, "cl%ld", (long)getpid());
    if (cluster_start() != 0) goto fail;
    for (size_t i = 0; i < g_nnodes; i++) {
        redisReply *r = ncmd(&g_nodes[i], "CLUSTER MYID");
        if (r == NULL || r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "test_cluster: CLUSTER MYID on :%d failed\n", g_nodes[i].port);
            if (r) freeReplyObject(r);
            goto fail;
        }
        snprintf(g_nodes[i].id, sizeof g_nodes[i].id, "%s", r->str);
        freeReplyObject(r);
    }
    if (load_slot_map(10000) != 0) {
        fprintf(stderr, "test_cluster: the nodes never agreed on the slot map\n");
        goto fail;
    }
    cnode_t *m[MAX_NODES];
    if (masters(m) != 3) {
        fprintf(stderr, "test_cluster: expected 3 masters, found %zu\n", masters(m));
        goto fail;
    }
    if (start_daemon(&g_a, "A") != 0 || start_daemon(&g_b, "B") != 0) goto fail;
    fflush(stdout);
    return 0;
fail:
    group_teardown(state);
    return -1;
}

static inline int test_setup(void **state)
{
    (void)state;
    check_still_running(&g_a, "A");
    check_still_running(&g_b, "B");
    return 0;
}

static inline void settle_slot(void);

static pid_t g_stopped_pid;       /* a master a test SIGSTOPped: resumed here */

static inline int test_teardown(void **state)
{
    (void)state;
    if (g_stopped_pid > 0) kill(g_stopped_pid, SIGCONT);
    g_stopped_pid = 0;
    settle_slot();
    for (size_t i = 0; i < 2; i++) e2e_conn_close(&g_conns[i]);
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* HTTP from the main thread                                                */
/* ------------------------------------------------------------------------ */

static inline void http_to(int port, e2e_response_t *r, const char *method, const char *path,
                    const char *body)
{
    e2e_http_via(g_conns, 2, port, r, method, path, body);
}

static inline rd_json_t *expect_json(const e2e_response_t *r, int status, const char *what)
{
    if (r->status != status)
        fail_msg("%s: expected %d, got %d: %s", what, status, r->status, r->body);
    if (r->json == NULL || !rd_json_is_object(r->json)) fail_msg("%s: body is not JSON", what);
    return r->json;
}

/* A message from a 200/201 response: its id, status, retry_count, token. */
typedef struct msg {
    long long id;
    char status[16];
    long long retry_count;
    char token[64];
} msg_t;

static inline msg_t call_msg(int port, const char *method, const char *path, const char *body,
                      int want, const char *what)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, method, path, body);
    rd_json_t *j = expect_json(&r, want, what);
    msg_t m = { 0 };
    m.id = e2e_jint(j, "id");
    snprintf(m.status, sizeof m.status, "%s", e2e_jstr(j, "status"));
    m.retry_count = e2e_jint(j, "retry_count");
    const char *t = rd_json_string(rd_json_get(j, "lease_token"));
    if (t) snprintf(m.token, sizeof m.token, "%s", t);
    e2e_response_free(&r);
    return m;
}

static inline msg_t enqueue_to(int port, const char *q, const char *body)
{
    return call_msg(port, "POST", e2e_fmt("/queues/%s/messages", e2e_url_encode(q)), body, 201,
                    "enqueue");
}

static inline msg_t claim_from(int port, const char *q)
{
    msg_t m = call_msg(port, "POST", e2e_fmt("/queues/%s/claim", e2e_url_encode(q)),
                       "{\"lease_seconds\":30}", 200, "claim");
    assert_string_equal(m.status, "processing");
    assert_true(m.token[0] != '\0');
    return m;
}

static inline msg_t settle(int port, const char *q, const msg_t *claimed, const char *verb,
                    const char *extra)
{
    const char *body = e2e_fmt("{\"lease_token\":\"%s\"%s%s}", claimed->token, extra ? "," : "",
                           extra ? extra : "");
    return call_msg(port, "POST",
                    e2e_fmt("/queues/%s/messages/%lld/%s", e2e_url_encode(q), claimed->id, verb),
                    body, 200, verb);
}

#endif
