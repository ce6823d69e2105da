/* redis.h - retryd's one Redis connection. hiredis parses the replies and
 * formats the commands (only redis.c includes it); the bytes travel over
 * retryd's own transport, libuv TCP with optional TLS (OpenSSL): nothing
 * outside redis.c and redis_transport.c knows whether a link is encrypted.
 *
 * The connection is a state machine: CLOSED -> CONNECTING -> LOADING (AUTH,
 * SELECT, FUNCTION LOAD REPLACE of the retryd library) -> READY. A dropped
 * link goes back to CLOSED and reconnects with backoff (100 ms doubling to
 * 5 s). Commands are accepted only while READY; otherwise rd_redis_command
 * fails at once so callers can answer 503 without waiting.
 *
 * Every command has a deadline (timeout_ms): Redis answers in order, so a
 * watchdog looks at the oldest command and, when it is late, drops the link;
 * every command then in flight completes with RD_REDIS_LOST.
 *
 * When Redis answers an FCALL with "Function not found" (restarted without
 * persistence, FUNCTION FLUSH, failover), the library is loaded again and the
 * command resent once: it never ran, so resending cannot duplicate anything. */
#ifndef RETRYD_REDIS_H
#define RETRYD_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "retryd/metrics.h"

typedef struct rd_redis rd_redis_t;

/* A read-only view of a reply, valid only inside the callback that got it. */
typedef struct rd_reply rd_reply_t;

typedef enum rd_reply_type {
    RD_REPLY_STRING,
    RD_REPLY_ARRAY,
    RD_REPLY_INTEGER,
    RD_REPLY_NIL,
    RD_REPLY_STATUS,
    RD_REPLY_ERROR,
} rd_reply_type_t;

/* Every accessor takes NULL (e.g. rd_reply_at past the end, or of a reply
 * that is not an array) as an absent reply: type NIL, no string, no
 * elements, no integer. A reply of an unexpected shape is never a crash. */
rd_reply_type_t rd_reply_type(const rd_reply_t *r);
/* Bytes of a string, status or error reply (NULL for other types). */
const char *rd_reply_str(const rd_reply_t *r, size_t *len);
/* Elements of an array reply (0 for other types); element i or NULL. */
size_t rd_reply_len(const rd_reply_t *r);
const rd_reply_t *rd_reply_at(const rd_reply_t *r, size_t i);
/* An integer reply, or a string holding a decimal integer. */
bool rd_reply_int(const rd_reply_t *r, long long *out);
/* True when r is a string/status equal to s. */
bool rd_reply_is(const rd_reply_t *r, const char *s);
/* A deep copy of r that outlives the callback it was given to (NULL for
 * NULL), freed with rd_reply_free. */
rd_reply_t *rd_reply_copy(const rd_reply_t *r);
void rd_reply_free(rd_reply_t *r);

typedef enum rd_redis_status {
    RD_REDIS_OK,    /* reply is Redis's answer (possibly an error reply) */
    RD_REDIS_LOST,  /* the link dropped after the command was sent: it may or may
                       not have run; reply is NULL */
    RD_REDIS_NOT_SENT, /* cluster: no master could take it (redirects, failover);
                          it did not run; reply is NULL */
} rd_redis_status_t;

typedef void (*rd_redis_cb)(const rd_reply_t *reply, rd_redis_status_t status, void *arg);

typedef enum rd_pubsub_event {
    RD_PUBSUB_SUBSCRIBED,     /* Redis confirmed the subscription */
    RD_PUBSUB_MESSAGE,        /* a message arrived on the channel */
    RD_PUBSUB_UNSUBSCRIBED,   /* Redis confirmed the unsubscription: last call */
    RD_PUBSUB_DROPPED,        /* the link dropped: last call; subscribe again when ready */
} rd_pubsub_event_t;

typedef void (*rd_pubsub_cb)(rd_pubsub_event_t event, void *arg);

/* TLS settings shared by every link that uses them (docs/security.md "TLS to
 * Redis"). Server certificates are verified against ca_file, or the system
 * store when it is NULL/"", and the certificate must name server_name, or
 * else the host the link connects to (an IP address is checked against the
 * certificate's IP entries); the name (not an IP) is also sent as SNI.
 * cert_file and key_file (PEM) give a client certificate for mutual TLS.
 * insecure skips every check of the server (logged once, at creation). */
typedef struct rd_redis_tls_options {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    const char *server_name;
    bool insecure;
} rd_redis_tls_options_t;

typedef struct rd_redis_tls rd_redis_tls_t;

/* Loads the CA, the client certificate and key. Returns NULL with a one-line
 * reason in err when a file cannot be used (a start-up error, not a
 * connection failure). */
rd_redis_tls_t *rd_redis_tls_new(const rd_redis_tls_options_t *opts, char *err, size_t err_len);
/* Frees it; every link that used it must be closed first. NULL is fine. */
void rd_redis_tls_free(rd_redis_tls_t *tls);

typedef struct rd_redis_options {
    const char *host;
    int port;
    const char *username;   /* NULL or "" for none */
    const char *password;   /* NULL or "" for none */
    int db;
    int timeout_ms;         /* deadline of every command and of the handshake */
    const char *library;    /* Lua source of the Functions library (borrowed, static);
                               NULL for a notification link (pub/sub only) */
    void (*on_ready)(void *arg);  /* NULL, or called each time the link becomes READY */
    void *on_ready_arg;
    const rd_redis_tls_t *tls;    /* NULL: plain TCP; borrowed, outlives the link. A TLS
                                     handshake is part of the connect, under timeout_ms */
} rd_redis_options_t;

/* Creates the connection (CLOSED) and starts connecting. Strings in opts are
 * copied. Never fails: an unreachable Redis is retried with backoff. */
rd_redis_t *rd_redis_start(uv_loop_t *loop, const rd_redis_options_t *opts);

bool rd_redis_ready(const rd_redis_t *r);
/* True while a connect attempt is under way (connecting or in the handshake):
 * it ends READY, or failed within the handshake's deadline (timeout_ms). */
bool rd_redis_connecting(const rd_redis_t *r);
/* True once a connect attempt has ended, READY or failed (the link may have
 * gone down again since). */
bool rd_redis_attempted(const rd_redis_t *r);

/* Round-trip times of the commands answered on this link, in seconds. */
const rd_histogram_t *rd_redis_rtt(const rd_redis_t *r);

/* Sends argv (binary-safe). Returns 0 and later calls cb exactly once from the
 * loop (cb NULL: the reply is dropped); or -1 when the connection is not READY,
 * and cb is never called. */
int rd_redis_command(rd_redis_t *r, int argc, const char **argv, const size_t *lens,
                     rd_redis_cb cb, void *arg);

/* On a notification link (library NULL): SUBSCRIBE to channel. Returns -1
 * when not READY (cb never called); otherwise cb runs with SUBSCRIBED, then
 * MESSAGE per message, and finally once with UNSUBSCRIBED or DROPPED. */
int rd_redis_subscribe(rd_redis_t *r, const char *channel, size_t len, rd_pubsub_cb cb,
                       void *arg);
/* UNSUBSCRIBE; the subscription's cb gets UNSUBSCRIBED. -1 when not READY. */
int rd_redis_unsubscribe(rd_redis_t *r, const char *channel, size_t len);

/* Closes the connection and frees r. Commands in flight complete (RD_REDIS_OK
 * when Redis still answers them; with force, at once with RD_REDIS_LOST).
 * on_closed runs once, from the loop, after every handle is closed. */
void rd_redis_close(rd_redis_t *r, bool force, void (*on_closed)(void *arg), void *arg);

#endif
