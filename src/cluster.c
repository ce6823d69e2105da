/* cluster.c - Redis Cluster routing: slot map, one link per master,
 * redirects. See docs/cluster.md. */
#include "retryd/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "retryd/alloc.h"
#include "retryd/config.h"
#include "retryd/log.h"

enum {
    SLOTS = 16384,
    MAX_REDIRECTS = 5,
    MAX_RETRIES = 20,           /* TRYAGAIN, ASK, CLUSTERDOWN, no link: 20 x 50 ms */
    RETRY_DELAY_MS = 50,
    REFRESH_EVERY_MS = 10000,
    CONTROL_PATIENCE_MS = 2000,
};

/* ---------------------------------------------------------------- slots */

static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                                          : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned rd_cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) return crc16(open + 1, (size_t)(close - open - 1)) % SLOTS;
    }
    return crc16(key, len) % SLOTS;
}

static bool command_is(const char *s, size_t len, const char *lit)
{
    return len == strlen(lit) && strncasecmp(s, lit, len) == 0;
}

/* Only the commands retryd sends are known: FCALL/FCALL_RO by KEYS[1], the
 * registry's SADD/SMEMBERS by their key; anything else goes to any master. */
int rd_cluster_command_slot(int argc, const char **argv, const size_t *lens)
{
    if (argc >= 1 && (command_is(argv[0], lens[0], "FCALL") ||
                      command_is(argv[0], lens[0], "FCALL_RO"))) {
        if (argc < 4 || (lens[2] == 1 && argv[2][0] == '0')) return -1;
        return (int)rd_cluster_slot(argv[3], lens[3]);
    }
    if (argc >= 2 && (command_is(argv[0], lens[0], "SADD") ||
                      command_is(argv[0], lens[0], "SMEMBERS")))
        return (int)rd_cluster_slot(argv[1], lens[1]);
    return -1;
}

/* ---------------------------------------------------------------- state */

typedef struct node {
    struct rd_cluster *owner;
    char host[256];
    int port;
    rd_redis_t *link;           /* command link with the library; NULL until needed */
    bool master;                /* owns slots in the current map */
    struct node *next;
} node_t;

struct rd_cluster {
    uv_loop_t *loop;
    rd_redis_options_t opts;    /* strings owned below */
    char *username, *password;
    node_t *nodes;              /* every node ever seen */
    node_t *slot_owner[SLOTS];
    bool map_known;
    bool started;               /* latched: every master of a map had its first attempt */
    rd_redis_t *control;        /* library-less link for CLUSTER SLOTS */
    node_t *control_node;
    uint64_t control_since_ms;
    bool refreshing;
    uv_timer_t refresh_timer;
    rd_histogram_t rtt;         /* merged on demand */
    bool closing;
    size_t calls;               /* live ccall_t: freed before the cluster is */
    int closing_links;
    void (*on_closed)(void *arg);
    void *on_closed_arg;
};

static node_t *find_node(rd_cluster_t *c, const char *host, size_t host_len, int port)
{
    for (node_t *n = c->nodes; n; n = n->next)
        if (n->port == port && strlen(n->host) == host_len && memcmp(n->host, host, host_len) == 0)
            return n;
    if (host_len >= sizeof c->nodes->host) return NULL;
    node_t *n = rd_calloc(1, sizeof *n);
    n->owner = c;
    memcpy(n->host, host, host_len);
    n->host[host_len] = '\0';
    n->port = port;
    n->next = c->nodes;
    c->nodes = n;
    return n;
}

static rd_redis_t *open_link(rd_cluster_t *c, node_t *n, bool with_library)
{
    rd_redis_options_t o = c->opts;
    o.host = n->host;
    o.port = n->port;
    if (!with_library) {
        o.library = NULL;
        o.on_ready = NULL;
    }
    return rd_redis_start(c->loop, &o);
}

static void ensure_link(rd_cluster_t *c, node_t *n)
{
    if (n->link == NULL && !c->closing) {
        rd_info("cluster: connecting to master %s:%d", n->host, n->port);
        n->link = open_link(c, n, true);
    }
}

/* ---------------------------------------------------------------- the map */

static void refresh(rd_cluster_t *c);

static void latch_started(rd_cluster_t *c);

static void on_slots(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    rd_cluster_t *c = arg;
    c->refreshing = false;
    if (status != RD_REDIS_OK || rd_reply_type(reply) != RD_REPLY_ARRAY) {
        rd_warn("cluster: CLUSTER SLOTS failed; will ask again");
        return;
    }
    latch_started(c);  /* before the new map's masters count */
    node_t *owner[SLOTS];
    memset(owner, 0, sizeof owner);
    for (size_t i = 0; i < rd_reply_len(reply); i++) {
        const rd_reply_t *range = rd_reply_at(reply, i);
        long long from, to, port;
        const rd_reply_t *master = rd_reply_at(range, 2);
        size_t host_len;
        const char *host = master ? rd_reply_str(rd_reply_at(master, 0), &host_len) : NULL;
        if (rd_reply_len(range) < 3 || !rd_reply_int(rd_reply_at(range, 0), &from) ||
            !rd_reply_int(rd_reply_at(range, 1), &to) || host == NULL ||
            !rd_reply_int(rd_reply_at(master, 1), &port) || from < 0 || to >= SLOTS || from > to)
            continue;
        if (host_len == 0) {  /* "" means "the node you asked" */
            host = c->control_node->host;
            host_len = strlen(host);
        }
        node_t *n = find_node(c, host, host_len, (int)port);
        if (n == NULL) continue;
        for (long long s = from; s <= to; s++) owner[s] = n;
    }
    for (node_t *n = c->nodes; n; n = n->next) n->master = false;
    for (int s = 0; s < SLOTS; s++) {
        c->slot_owner[s] = owner[s];
        if (owner[s]) owner[s]->master = true;
    }
    for (node_t *n = c->nodes; n; n = n->next) {
        if (n->master) {
            ensure_link(c, n);
        } else if (n->link) {
            /* Demoted (failover) or emptied: calls in flight still complete. */
            rd_info("cluster: %s:%d owns no slots now; closing its link", n->host, n->port);
            rd_redis_close(n->link, false, NULL, NULL);
            n->link = NULL;
        }
    }
    if (!c->map_known) rd_info("cluster: slot map known");
    c->map_known = true;
}

/* The control link asks CLUSTER SLOTS; when its node stops answering it
 * moves to the next known node. */
static void refresh(rd_cluster_t *c)
{
    if (c->closing || c->refreshing) return;
    uint64_t now = uv_now(c->loop);
    if (c->control && !rd_redis_ready(c->control) &&
        now - c->control_since_ms > CONTROL_PATIENCE_MS) {
        rd_redis_close(c->control, true, NULL, NULL);
        c->control = NULL;
        node_t *next = c->control_node && c->control_node->next ? c->control_node->next
                                                                : c->nodes;
        c->control_node = next;
    }
    if (c->control == NULL) {
        if (c->control_node == NULL) c->control_node = c->nodes;
        c->control = open_link(c, c->control_node, false);
        c->control_since_ms = now;
        return;  /* asked again once it is ready (the timer polls quickly until then) */
    }
    const char *argv[] = { "CLUSTER", "SLOTS" };
    size_t lens[] = { 7, 5 };
    if (rd_redis_command(c->control, 2, argv, lens, on_slots, c) == 0) c->refreshing = true;
}

static void on_refresh_timer(uv_timer_t *t)
{
    rd_cluster_t *c = t->data;
    refresh(c);
    /* Poll fast until the map is known, then every REFRESH_EVERY_MS. */
    uv_timer_start(&c->refresh_timer, on_refresh_timer,
                   c->map_known ? REFRESH_EVERY_MS : 100, 0);
}

/* ---------------------------------------------------------------- calls */

typedef struct ccall {
    rd_cluster_t *c;
    rd_redis_cb cb;
    void *arg;
    int slot;
    int tries;                  /* MOVED redirects followed */
    int waits;                  /* retries after TRYAGAIN, ASK, CLUSTERDOWN, no link */
    uint64_t deadline_ms;       /* loop time: waits for a connecting link end here */
    uv_timer_t retry;
    int argc;
    const char **argv;
    size_t *lens;
} ccall_t;

static void send_call(ccall_t *k);

static void on_ccall_closed(uv_handle_t *h)
{
    rd_free(h->data);
}

static void maybe_free(rd_cluster_t *c);

static void finish(ccall_t *k, const rd_reply_t *reply, rd_redis_status_t status)
{
    rd_cluster_t *c = k->c;
    k->cb(reply, status, k->arg);
    uv_close((uv_handle_t *)&k->retry, on_ccall_closed);
    c->calls--;
    maybe_free(c);
}

static void on_retry(uv_timer_t *t)
{
    send_call(t->data);
}

static void retry_later(ccall_t *k)
{
    if (++k->waits > MAX_RETRIES || k->c->closing) {
        finish(k, NULL, RD_REDIS_NOT_SENT);
        return;
    }
    uv_timer_start(&k->retry, on_retry, RETRY_DELAY_MS, 0);
}

/* "MOVED 3999 127.0.0.1:6381" -> slot and node. */
static node_t *redirect_target(rd_cluster_t *c, const char *err, size_t len, long *slot)
{
    const char *sp = memchr(err, ' ', len);
    if (sp == NULL) return NULL;
    char *end;
    *slot = strtol(sp + 1, &end, 10);
    if (*end != ' ' || *slot < 0 || *slot >= SLOTS) return NULL;
    const char *addr = end + 1;
    const char *colon = memrchr(addr, ':', len - (size_t)(addr - err));
    if (colon == NULL) return NULL;
    int port = atoi(colon + 1);
    return port > 0 ? find_node(c, addr, (size_t)(colon - addr), port) : NULL;
}

static void on_call_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    ccall_t *k = arg;
    rd_cluster_t *c = k->c;
    if (status != RD_REDIS_OK || rd_reply_type(reply) != RD_REPLY_ERROR) {
        finish(k, reply, status);
        return;
    }
    size_t len;
    const char *err = rd_reply_str(reply, &len);
    long slot;
    if (len > 6 && strncmp(err, "MOVED ", 6) == 0) {
        node_t *n = redirect_target(c, err, len, &slot);
        if (n == NULL) {
            finish(k, reply, status);
            return;
        }
        if (++k->tries > MAX_REDIRECTS) {
            finish(k, NULL, RD_REDIS_NOT_SENT);  /* it never ran */
            return;
        }
        latch_started(c);  /* before n counts as a master */
        c->slot_owner[slot] = n;
        n->master = true;
        ensure_link(c, n);
        refresh(c);
        send_call(k);
        return;
    }
    /* ASK: the queue's slot is being migrated. A function declares only the
     * queue's key base, which never exists, so Redis asks us to go to the
     * target even when every key of the queue is still on the source; run
     * there, the function would start the queue over on an empty node. So a
     * call is never sent with ASKING: it waits, like TRYAGAIN, and answers 503
     * if the migration outlasts the retries. */
    if ((len > 4 && strncmp(err, "ASK ", 4) == 0) ||
        (len >= 8 && strncmp(err, "TRYAGAIN", 8) == 0) ||
        (len >= 11 && strncmp(err, "CLUSTERDOWN", 11) == 0)) {
        refresh(c);
        retry_later(k);
        return;
    }
    finish(k, reply, status);
}

static node_t *any_ready_master(const rd_cluster_t *c)
{
    for (node_t *n = c->nodes; n; n = n->next)
        if (n->master && n->link && rd_redis_ready(n->link)) return n;
    return NULL;
}

/* Whether a call for n may wait for its link: a connect attempt is under way
 * (at start, or after a drop), which ends READY or failed within the
 * handshake's deadline. A link waiting out its reconnect backoff fails fast. */
static bool worth_waiting(const node_t *n)
{
    return n != NULL && n->link != NULL && rd_redis_connecting(n->link);
}

static void send_call(ccall_t *k)
{
    rd_cluster_t *c = k->c;
    node_t *n = k->slot >= 0 ? c->slot_owner[k->slot] : any_ready_master(c);
    if (n == NULL || n->link == NULL || !rd_redis_ready(n->link)) {
        if (worth_waiting(n) && !c->closing && uv_now(c->loop) < k->deadline_ms)
            uv_timer_start(&k->retry, on_retry, RETRY_DELAY_MS, 0);
        else
            retry_later(k);
        return;
    }
    if (rd_redis_command(n->link, k->argc, k->argv, k->lens, on_call_reply, k) != 0)
        retry_later(k);
}

/* A command with no key (PING for /readyz, CONFIG GET) goes to every ready
 * master and the first success answers: "any master answers" must not hang
 * on the one master that stopped answering (docs/cluster.md "Readiness"). */
typedef struct fanout {
    rd_cluster_t *c;
    rd_redis_cb cb;
    void *arg;
    int outstanding;
    bool answered;
} fanout_t;

static void on_fanout_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    fanout_t *f = arg;
    rd_cluster_t *c = f->c;
    f->outstanding--;
    bool ok = status == RD_REDIS_OK && rd_reply_type(reply) != RD_REPLY_ERROR;
    if (!f->answered && (ok || f->outstanding == 0)) {
        f->answered = true;
        f->cb(reply, status, f->arg);
    }
    if (f->outstanding > 0) return;
    rd_free(f);
    c->calls--;
    maybe_free(c);
}

static int fan_out(rd_cluster_t *c, int argc, const char **argv, const size_t *lens,
                   rd_redis_cb cb, void *arg)
{
    fanout_t *f = rd_calloc(1, sizeof *f);
    *f = (fanout_t){ .c = c, .cb = cb, .arg = arg };
    c->calls++;
    f->outstanding = 1;  /* held while sending, so no reply frees it early */
    for (node_t *n = c->nodes; n; n = n->next) {
        if (!n->master || n->link == NULL || !rd_redis_ready(n->link)) continue;
        if (rd_redis_command(n->link, argc, argv, lens, on_fanout_reply, f) == 0) f->outstanding++;
    }
    if (--f->outstanding > 0) return 0;
    rd_free(f);  /* sent to none: nothing was called back */
    c->calls--;
    refresh(c);
    return -1;
}

int rd_cluster_command(rd_cluster_t *c, int argc, const char **argv, const size_t *lens,
                       rd_redis_cb cb, void *arg)
{
    if (c->closing || !c->map_known) return -1;
    int slot = rd_cluster_command_slot(argc, argv, lens);
    if (slot < 0) return fan_out(c, argc, argv, lens, cb, arg);
    node_t *n = slot >= 0 ? c->slot_owner[slot] : any_ready_master(c);
    bool ready = n != NULL && n->link != NULL && rd_redis_ready(n->link);
    if (!ready && !worth_waiting(n)) {
        if (n == NULL || n->link == NULL) refresh(c);
        return -1;
    }
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += lens[i];
    size_t head = sizeof(ccall_t) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    ccall_t *k = rd_malloc(head + bytes);
    memset(k, 0, sizeof *k);
    k->c = c;
    k->cb = cb;
    k->arg = arg;
    k->slot = slot;
    k->argc = argc;
    k->argv = (const char **)(void *)(k + 1);
    k->lens = (size_t *)(void *)(k->argv + argc);
    char *data = (char *)(k->lens + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(data, argv[i], lens[i]);
        k->argv[i] = data;
        k->lens[i] = lens[i];
        data += lens[i];
    }
    uv_timer_init(c->loop, &k->retry);
    k->retry.data = k;
    k->deadline_ms = uv_now(c->loop) + (uint64_t)(c->opts.timeout_ms > 0 ? c->opts.timeout_ms
                                                                          : 5000);
    if (!ready) {
        /* Its master's link is connecting: the call waits for it (polled every
         * RETRY_DELAY_MS) until its deadline, as it would wait for a reply. */
        c->calls++;
        uv_timer_start(&k->retry, on_retry, RETRY_DELAY_MS, 0);
        return 0;
    }
    if (rd_redis_command(n->link, argc, k->argv, k->lens, on_call_reply, k) != 0) {
        uv_close((uv_handle_t *)&k->retry, on_ccall_closed);
        return -1;
    }
    c->calls++;
    return 0;
}

/* ---------------------------------------------------------------- life cycle */

rd_cluster_t *rd_cluster_start(uv_loop_t *loop, const char *seeds, const rd_redis_options_t *opts)
{
    rd_cluster_t *c = rd_calloc(1, sizeof *c);
    c->loop = loop;
    c->opts = *opts;
    c->username = opts->username ? rd_strdup(opts->username) : NULL;
    c->password = opts->password ? rd_strdup(opts->password) : NULL;
    c->opts.username = c->username;
    c->opts.password = c->password;
    const char *p = seeds;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = memrchr(p, ':', len);
        int port = colon ? atoi(colon + 1) : 0;
        if (colon == NULL || port <= 0 || port > 65535 || colon == p ||
            find_node(c, p, (size_t)(colon - p), port) == NULL) {
            char shown[256];
            rd_config_mask_url(seeds, shown, sizeof shown);
            rd_error("cluster: bad seed in '%s' (want host:port,...)", shown);
            while (c->nodes) {
                node_t *n = c->nodes;
                c->nodes = n->next;
                rd_free(n);
            }
            rd_free(c->username);
            rd_free(c->password);
            rd_free(c);
            return NULL;
        }
        p += len;
        if (*p == ',') p++;
    }
    uv_timer_init(loop, &c->refresh_timer);
    c->refresh_timer.data = c;
    uv_timer_start(&c->refresh_timer, on_refresh_timer, 0, 0);
    return c;
}

bool rd_cluster_ready(const rd_cluster_t *c)
{
    return c->map_known && !c->closing && any_ready_master(c);
}

/* /readyz waits for this: a request for a master still connecting at start
 * would otherwise get the 503 that readiness promised away. After the first
 * attempts, a master that is down leaves the others available. */
static bool every_master_attempted(const rd_cluster_t *c)
{
    if (!c->map_known) return false;
    for (const node_t *n = c->nodes; n; n = n->next)
        if (n->master && (n->link == NULL || !rd_redis_attempted(n->link))) return false;
    return true;
}

/* The start is over once every master of the map had its first attempt: a
 * master that joins later (a new map, or a MOVED naming a node) does not
 * undo it. Called before either adds a master. */
static void latch_started(rd_cluster_t *c)
{
    if (!c->started && every_master_attempted(c)) c->started = true;
}

/* Latched: a master that joins the map later (a failover's promoted replica)
 * does not make /readyz 503 while its handshake runs; the others serve. */
bool rd_cluster_started(const rd_cluster_t *c)
{
    return !c->closing && (c->started || every_master_attempted(c));
}

const rd_histogram_t *rd_cluster_rtt(rd_cluster_t *c)
{
    bool first = true;
    for (node_t *n = c->nodes; n; n = n->next) {
        if (n->link == NULL) continue;
        const rd_histogram_t *h = rd_redis_rtt(n->link);
        if (first) {
            c->rtt = *h;
            first = false;
            continue;
        }
        for (size_t b = 0; b <= h->nbounds; b++) c->rtt.counts[b] += h->counts[b];
        c->rtt.sum += h->sum;
        c->rtt.count += h->count;
    }
    if (first) {
        static const double none[] = { 1 };
        rd_histogram_init(&c->rtt, none, 1);
    }
    return &c->rtt;
}

void rd_cluster_any_node(const rd_cluster_t *c, char *host, size_t host_len, int *port)
{
    node_t *n = c->nodes;
    while (n && n->next) n = n->next;  /* the first seed given */
    snprintf(host, host_len, "%s", n ? n->host : "127.0.0.1");
    *port = n ? n->port : 6379;
}

/* The cluster goes once every link, the refresh timer and every call are gone. */
static void maybe_free(rd_cluster_t *c)
{
    if (!c->closing || c->closing_links > 0 || c->calls > 0) return;
    while (c->nodes) {
        node_t *n = c->nodes;
        c->nodes = n->next;
        rd_free(n);
    }
    void (*cb)(void *) = c->on_closed;
    void *cb_arg = c->on_closed_arg;
    rd_free(c->username);
    rd_free(c->password);
    rd_free(c);
    if (cb) cb(cb_arg);
}

static void on_node_link_closed(void *arg)
{
    node_t *n = arg;
    rd_cluster_t *c = n->owner;
    n->link = NULL;
    c->closing_links--;
    maybe_free(c);
}

static void on_control_closed(void *arg)
{
    rd_cluster_t *c = arg;
    c->control = NULL;
    c->closing_links--;
    maybe_free(c);
}

static void on_refresh_timer_closed(uv_handle_t *h)
{
    rd_cluster_t *c = h->data;
    c->closing_links--;
    maybe_free(c);
}

void rd_cluster_close(rd_cluster_t *c, bool force, void (*on_closed)(void *arg), void *arg)
{
    if (c->closing) {
        if (force)
            for (node_t *n = c->nodes; n; n = n->next)
                if (n->link) rd_redis_close(n->link, true, NULL, NULL);
        return;
    }
    c->closing = true;
    c->on_closed = on_closed;
    c->on_closed_arg = arg;
    c->closing_links = 1;  /* the refresh timer */
    uv_timer_stop(&c->refresh_timer);
    uv_close((uv_handle_t *)&c->refresh_timer, on_refresh_timer_closed);
    if (c->control) {
        c->closing_links++;
        rd_redis_close(c->control, true, on_control_closed, c);
    }
    for (node_t *n = c->nodes; n; n = n->next) {
        if (n->link == NULL) continue;
        c->closing_links++;
        rd_redis_close(n->link, force, on_node_link_closed, n);
    }
}
