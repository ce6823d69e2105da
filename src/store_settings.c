/* store_settings.c - making the store, and what the daemon tells it once
 * (retention, alerts, series, the hooks of the modules above it). */
#include "retryd/store.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/keys.h"
#include "store_internal.h"

rd_store_t *rd_store_new(uv_loop_t *loop, rd_backend_t *redis, const char *prefix)
{
    rd_store_t *st = rd_calloc(1, sizeof *st);
    st->loop = loop;
    st->redis = redis;
    st->prefix = rd_strdup(prefix);
    st->series = true;
    st->views = rd_shard_views_new();
    rd_keys_registry(&st->registry_key, prefix);
    /* Unique per process start: nonces of two instances (or two runs of one)
     * never meet. */
    unsigned char r[8];
    if (uv_random(NULL, NULL, r, sizeof r, 0, NULL) != 0) {
        uint64_t t = uv_hrtime() ^ ((uint64_t)uv_os_getpid() << 32);
        memcpy(r, &t, sizeof r);
    }
    for (size_t i = 0; i < sizeof r; i++) snprintf(st->instance + 2 * i, 3, "%02x", r[i]);
    return st;
}

void rd_store_free(rd_store_t *st)
{
    if (st == NULL) return;
    rd_buf_free(&st->registry_key);
    rd_shard_views_free(st->views);
    rd_free(st->prefix);
    rd_free(st);
}

rd_shard_views_t *rd_store_views(rd_store_t *st)
{
    return st ? st->views : NULL;   /* NULL: a test's stand-in store (test_coalesce) */
}

uint64_t rd_store_now_ms(const rd_store_t *st)
{
    return st ? uv_now(st->loop) : 0;
}

void rd_store_set_retention(rd_store_t *st, long long dead_ttl_ms, long long succeeded_ttl_ms)
{
    st->dead_ttl_ms = dead_ttl_ms;
    st->succeeded_ttl_ms = succeeded_ttl_ms;
}

void rd_store_set_alerts(rd_store_t *st, long long recheck_ms, bool alert_url)
{
    st->alert_recheck_ms = recheck_ms;
    st->alert_url = alert_url;
}

void rd_store_set_fleet_alert_url(rd_store_t *st, bool on)
{
    st->fleet_alert_url = on;
}

void rd_store_set_series(rd_store_t *st, bool on)
{
    st->series = on;
}

void rd_store_set_write_hooks(rd_store_t *st,
                              void (*before)(void *arg, rd_store_queue_t q, bool always),
                              rd_store_written_fn written,
                              void *arg)
{
    st->before_write = before;
    st->written = written;
    st->write_arg = arg;
}

void rd_store_set_lost_claim_hook(rd_store_t *st,
                                  void (*lost)(void *arg, rd_store_queue_t q, const char *nonce),
                                  void *arg)
{
    st->claim_lost = lost;
    st->lost_arg = arg;
}

void rd_store_set_orphans_hook(rd_store_t *st,
                               void (*release)(void *arg, rd_store_queue_t q, size_t n,
                                               const rd_message_t *msgs),
                               void *arg)
{
    st->release_orphans = release;
    st->orphans_arg = arg;
}

bool rd_store_ready(const rd_store_t *st)
{
    return rd_backend_ready(st->redis);
}

bool rd_store_started(const rd_store_t *st)
{
    return rd_backend_started(st->redis);
}

const rd_histogram_t *rd_store_rtt(const rd_store_t *st)
{
    return rd_backend_rtt(st->redis);
}
