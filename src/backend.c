/* backend.c - one Redis or a Redis Cluster behind one interface. */
#include "retryd/backend.h"

#include <stdio.h>

#include "retryd/alloc.h"
#include "retryd/cluster.h"

struct rd_backend {
    rd_redis_t *single;         /* exactly one of these two */
    rd_cluster_t *cluster;
    char host[256];
    int port;
    void (*on_closed)(void *arg);
    void *on_closed_arg;
};

rd_backend_t *rd_backend_start(uv_loop_t *loop, const rd_redis_options_t *opts,
                               const char *cluster_seeds)
{
    rd_backend_t *b = rd_calloc(1, sizeof *b);
    if (cluster_seeds && cluster_seeds[0]) {
        b->cluster = rd_cluster_start(loop, cluster_seeds, opts);
        if (b->cluster == NULL) {
            rd_free(b);
            return NULL;
        }
    } else {
        b->single = rd_redis_start(loop, opts);
        snprintf(b->host, sizeof b->host, "%s", opts->host);
        b->port = opts->port;
    }
    return b;
}

bool rd_backend_ready(const rd_backend_t *b)
{
    return b->cluster ? rd_cluster_ready(b->cluster) : rd_redis_ready(b->single);
}

bool rd_backend_started(const rd_backend_t *b)
{
    return b->cluster ? rd_cluster_started(b->cluster) : rd_redis_attempted(b->single);
}

int rd_backend_command(rd_backend_t *b, int argc, const char **argv, const size_t *lens,
                       rd_redis_cb cb, void *arg)
{
    return b->cluster ? rd_cluster_command(b->cluster, argc, argv, lens, cb, arg)
                      : rd_redis_command(b->single, argc, argv, lens, cb, arg);
}

const rd_histogram_t *rd_backend_rtt(rd_backend_t *b)
{
    return b->cluster ? rd_cluster_rtt(b->cluster) : rd_redis_rtt(b->single);
}

void rd_backend_notify_address(const rd_backend_t *b, char *host, size_t host_len, int *port)
{
    if (b->cluster) {
        rd_cluster_any_node(b->cluster, host, host_len, port);
        return;
    }
    snprintf(host, host_len, "%s", b->host);
    *port = b->port;
}

static void on_closed(void *arg)
{
    rd_backend_t *b = arg;
    void (*cb)(void *) = b->on_closed;
    void *cb_arg = b->on_closed_arg;
    rd_free(b);
    if (cb) cb(cb_arg);
}

void rd_backend_close(rd_backend_t *b, bool force, void (*cb)(void *arg), void *arg)
{
    if (b->on_closed == NULL && b->on_closed_arg == NULL) {
        b->on_closed = cb;
        b->on_closed_arg = arg;
    }
    if (b->cluster) rd_cluster_close(b->cluster, force, on_closed, b);
    else rd_redis_close(b->single, force, on_closed, b);
}
