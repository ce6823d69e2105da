/* redis_transport.h - the byte stream under one Redis link (only redis.c
 * includes it): libuv TCP, with OpenSSL on top when the link speaks TLS.
 *
 * One path for both: a plain link is the same stream without the SSL layer.
 * With TLS the SSL object never touches the socket: two memory BIOs sit
 * between it and libuv (bytes read are fed in, bytes it wants sent are
 * taken out and written), so the connection stays on the loop and under the
 * link's deadlines like any other.
 *
 * Life cycle: rd_transport_open resolves, connects and (TLS) handshakes, then
 * calls on_open; on_data hands each run of plaintext read; on_fail is the
 * last of those three, with a one-line reason naming what failed. The owner
 * calls rd_transport_close exactly once (also after on_fail, also from inside
 * a callback): no callback but on_closed runs after it, and on_closed runs
 * once when every handle is closed and the transport is freed. */
#ifndef RETRYD_REDIS_TRANSPORT_H
#define RETRYD_REDIS_TRANSPORT_H

#include <stddef.h>
#include <uv.h>

#include "retryd/redis.h"

typedef struct rd_transport rd_transport_t;

typedef struct rd_transport_events {
    void (*on_open)(void *arg);
    void (*on_data)(void *arg, const char *data, size_t len);
    void (*on_fail)(void *arg, const char *why);
    void (*on_closed)(void *arg);
} rd_transport_events_t;

/* Starts the connection; tls NULL for plain TCP. Returns NULL with a reason
 * in err when it cannot even start (no callback then runs). */
rd_transport_t *rd_transport_open(uv_loop_t *loop, const char *host, int port,
                                  const rd_redis_tls_t *tls, const rd_transport_events_t *ev,
                                  void *arg, char *err, size_t err_len);

/* What the transport is doing before on_open ("resolving", "connecting",
 * "TLS handshake"), or "open": for the deadline's message. */
const char *rd_transport_stage(const rd_transport_t *t);

/* Queues len bytes of plaintext (copied) to be sent; only after on_open. */
void rd_transport_write(rd_transport_t *t, const char *data, size_t len);

void rd_transport_close(rd_transport_t *t);

#endif
