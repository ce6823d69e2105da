/* redis_transport.c - a Redis link's byte stream: name resolution, TCP
 * connect, and for TLS an OpenSSL session pumped through memory BIOs
 * (redis_transport.h). Also the shared TLS settings of redis.h. */
#include "redis_transport.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

enum { READ_CHUNK = 64 * 1024 };

/* ---------------------------------------------------------------- TLS settings */

struct rd_redis_tls {
    SSL_CTX *ctx;
    char *server_name;          /* NULL: check the host each link connects to */
    bool insecure;
};

/* The newest OpenSSL error as one line ("error:0A000086:SSL routines::
 * certificate verify failed"), or fallback when the queue is empty. */
static void openssl_reason(char *out, size_t cap, const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0) snprintf(out, cap, "%s", fallback);
    else ERR_error_string_n(e, out, cap);
    ERR_clear_error();
}

rd_redis_tls_t *rd_redis_tls_new(const rd_redis_tls_options_t *o, char *err, size_t err_len)
{
    char why[256];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        openssl_reason(why, sizeof why, "out of memory");
        snprintf(err, err_len, "TLS: cannot create a context: %s", why);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Partial writes never happen with memory BIOs, but a retried SSL_write
     * must not insist on the same buffer address. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *failed = NULL, *file = NULL;
    if (o->ca_file && o->ca_file[0]) {
        if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1)
            failed = "cannot load the CA file", file = o->ca_file;
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        failed = "cannot load the system's CA store", file = "";
    }
    bool has_cert = o->cert_file && o->cert_file[0], has_key = o->key_file && o->key_file[0];
    if (!failed && has_cert != has_key) {
        snprintf(err, err_len, "TLS: --redis-tls-cert and --redis-tls-key go together");
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (!failed && has_cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1)
            failed = "cannot load the client certificate", file = o->cert_file;
        else if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1)
            failed = "cannot load the client key", file = o->key_file;
        else if (SSL_CTX_check_private_key(ctx) != 1)
            failed = "the client key does not match the certificate", file = o->key_file;
    }
    if (failed) {
        openssl_reason(why, sizeof why, "unknown error");
        snprintf(err, err_len, "TLS: %s%s%s: %s", failed, file[0] ? " " : "", file, why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, o->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    rd_redis_tls_t *t = rd_calloc(1, sizeof *t);
    t->ctx = ctx;
    t->server_name = o->server_name && o->server_name[0] ? rd_strdup(o->server_name) : NULL;
    t->insecure = o->insecure;
    if (o->insecure)
        rd_warn("redis: --redis-tls-insecure: the Redis server's certificate is NOT verified; "
                "anyone on the path can read and change the traffic");
    return t;
}

void rd_redis_tls_free(rd_redis_tls_t *t)
{
    if (t == NULL) return;
    SSL_CTX_free(t->ctx);
    rd_free(t->server_name);
    rd_free(t);
}

/* ---------------------------------------------------------------- the transport */

typedef enum stage { RESOLVING, CONNECTING, HANDSHAKE, OPEN, FAILED } stage_t;

struct rd_transport {
    uv_loop_t *loop;
    rd_transport_events_t ev;
    void *arg;
    stage_t stage;
    bool closed;                /* rd_transport_close was called */
    bool write_failed;          /* the peer reset: the read side reports why */
    int refs;                   /* the resolver request and the TCP handle */

    uv_getaddrinfo_t resolve;
    struct addrinfo *addrs, *next_addr;
    uv_tcp_t *tcp;              /* NULL before the connect and once closing; one
                                   per address tried, freed when closed */
    uv_connect_t connect;
    char port[8];

    SSL *ssl;                   /* NULL for plain TCP */
    BIO *in, *out;              /* owned by ssl: bytes read, bytes to send */
    char rbuf[READ_CHUNK];
};

typedef struct write_req {
    uv_write_t req;
    rd_transport_t *t;
    char data[];
} write_req_t;

static void release(rd_transport_t *t)
{
    if (--t->refs > 0) return;
    if (t->addrs) uv_freeaddrinfo(t->addrs);
    if (t->ssl) SSL_free(t->ssl);
    void (*cb)(void *) = t->ev.on_closed;
    void *arg = t->arg;
    rd_free(t);
    if (cb) cb(arg);
}

static void on_tcp_closed(uv_handle_t *h)
{
    rd_transport_t *t = h->data;
    rd_free(h);
    release(t);
}

static void close_tcp(rd_transport_t *t)
{
    if (t->tcp == NULL) return;
    uv_close((uv_handle_t *)t->tcp, on_tcp_closed);
    t->tcp = NULL;
}

/* The one way a transport fails: on_fail once, then nothing but on_closed. */
static void fail(rd_transport_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(rd_transport_t *t, const char *fmt, ...)
{
    if (t->closed || t->stage == FAILED) return;
    t->stage = FAILED;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (t->tcp) uv_read_stop((uv_stream_t *)t->tcp);
    t->ev.on_fail(t->arg, why);
}

static void on_written(uv_write_t *req, int status)
{
    write_req_t *w = (write_req_t *)(void *)req;
    rd_transport_t *t = w->t;
    rd_free(w);
    /* A peer that refuses us (a TLS alert, then a close) resets the
     * connection under a write of ours; what it said is still to be read,
     * and the read side reports it (or the reset), within the deadline. */
    if (status < 0 && status != UV_ECANCELED) t->write_failed = true;
}

/* Sends len raw bytes (ciphertext, or plaintext on a plain link). */
static void send_raw(rd_transport_t *t, const char *data, size_t len)
{
    if (len == 0 || t->write_failed) return;
    write_req_t *w = rd_malloc(sizeof *w + len);
    w->t = t;
    memcpy(w->data, data, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)t->tcp, &b, 1, on_written);
    if (rc < 0) {
        rd_free(w);
        fail(t, "write failed: %s", uv_strerror(rc));
    }
}

/* Writes whatever the SSL object has queued for the peer, in one write. */
static void pump_out(rd_transport_t *t)
{
    size_t n = (size_t)BIO_ctrl_pending(t->out);
    if (n == 0 || t->tcp == NULL) return;
    if (t->write_failed) {
        (void)BIO_reset(t->out);
        return;
    }
    write_req_t *w = rd_malloc(sizeof *w + n);
    w->t = t;
    int got = BIO_read(t->out, w->data, (int)n);
    if (got <= 0) {
        rd_free(w);
        return;
    }
    uv_buf_t b = uv_buf_init(w->data, (unsigned)got);
    int rc = uv_write(&w->req, (uv_stream_t *)t->tcp, &b, 1, on_written);
    if (rc < 0) {
        rd_free(w);
        fail(t, "write failed: %s", uv_strerror(rc));
    }
}

/* Why a TLS call failed, in words an operator can act on. */
static void tls_failure(rd_transport_t *t, int rc, const char *during)
{
    int e = SSL_get_error(t->ssl, rc);
    long verify = SSL_get_verify_result(t->ssl);
    char why[256];
    if (t->stage == HANDSHAKE && verify != X509_V_OK) {
        ERR_clear_error();
        fail(t, "TLS %s failed: the server's certificate did not verify: %s", during,
             X509_verify_cert_error_string(verify));
        return;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        fail(t, "the server closed the TLS session");
        return;
    }
    openssl_reason(why, sizeof why, e == SSL_ERROR_SYSCALL ? "connection closed" : "TLS error");
    /* A plain-TCP port answers a ClientHello with bytes that are no TLS record. */
    const char *hint = strstr(why, "wrong version number") || strstr(why, "packet length too long")
                           ? " (is the port plain TCP? use redis://)"
                           : "";
    fail(t, "TLS %s failed: %s%s", during, why, hint);
}

static void tls_handshake(rd_transport_t *t)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(t->ssl);
    pump_out(t);
    if (t->stage == FAILED || t->closed) return;
    if (rc == 1) {
        t->stage = OPEN;
        t->ev.on_open(t->arg);
        return;
    }
    if (SSL_get_error(t->ssl, rc) != SSL_ERROR_WANT_READ) tls_failure(t, rc, "handshake");
}

/* Decrypts everything the input BIO holds, handing it up chunk by chunk. */
static void tls_read(rd_transport_t *t)
{
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(t->ssl, t->rbuf, sizeof t->rbuf);
        if (n > 0) {
            t->ev.on_data(t->arg, t->rbuf, (size_t)n);
            if (t->closed || t->stage == FAILED) return;
            continue;
        }
        pump_out(t);  /* a key update or an alert may want an answer */
        if (t->closed || t->stage == FAILED) return;
        if (SSL_get_error(t->ssl, n) != SSL_ERROR_WANT_READ) tls_failure(t, n, "read");
        return;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    rd_transport_t *t = h->data;
    *buf = uv_buf_init(t->rbuf, sizeof t->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    rd_transport_t *t = s->data;
    if (t->closed || t->stage == FAILED) return;
    if (nread == UV_EOF) {
        fail(t, "the server closed the connection%s",
             t->stage == HANDSHAKE ? " during the TLS handshake (is it a TLS port?)" : "");
        return;
    }
    if (nread < 0) {
        fail(t, "read failed: %s", uv_strerror((int)nread));
        return;
    }
    if (nread == 0) return;
    if (t->ssl == NULL) {
        t->ev.on_data(t->arg, buf->base, (size_t)nread);
        return;
    }
    /* Memory BIOs grow as needed: the write cannot fall short. */
    BIO_write(t->in, buf->base, (int)nread);
    if (t->stage == HANDSHAKE) tls_handshake(t);
    if (t->stage == OPEN && !t->closed) tls_read(t);
}

static void try_connect(rd_transport_t *t);

static void on_connected(uv_connect_t *req, int status)
{
    rd_transport_t *t = req->data;
    if (t->closed) return;
    if (status < 0) {
        if (t->next_addr) {  /* the next address of the name, as hiredis did */
            close_tcp(t);
            try_connect(t);
            return;
        }
        fail(t, "%s", uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(t->tcp, 1);
    uv_read_start((uv_stream_t *)t->tcp, on_alloc, on_read);
    if (t->ssl == NULL) {
        t->stage = OPEN;
        t->ev.on_open(t->arg);
        return;
    }
    t->stage = HANDSHAKE;
    tls_handshake(t);
}

static void try_connect(rd_transport_t *t)
{
    struct addrinfo *a = t->next_addr;
    t->next_addr = a->ai_next;
    t->tcp = rd_malloc(sizeof *t->tcp);
    uv_tcp_init(t->loop, t->tcp);
    t->tcp->data = t;
    t->refs++;
    t->stage = CONNECTING;
    t->connect.data = t;
    int rc = uv_tcp_connect(&t->connect, t->tcp, a->ai_addr, on_connected);
    if (rc < 0) fail(t, "%s", uv_strerror(rc));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rd_transport_t *t = req->data;
    t->addrs = res;
    t->next_addr = res;
    if (!t->closed) {
        if (status < 0 || res == NULL)
            fail(t, "cannot resolve the name: %s", uv_strerror(status < 0 ? status : UV_EAI_NONAME));
        else
            try_connect(t);
    }
    release(t);
}

/* The SSL object of one link: SNI and the name (or IP) its certificate must carry. */
static SSL *new_ssl(const rd_redis_tls_t *tls, const char *host, BIO **in, BIO **out)
{
    SSL *ssl = SSL_new(tls->ctx);
    if (ssl == NULL) return NULL;
    const char *name = tls->server_name ? tls->server_name : host;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip) SSL_set_tlsext_host_name(ssl, name);
    if (!tls->insecure) {
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name)
                       : X509_VERIFY_PARAM_set1_host(param, name, 0);
        if (ok != 1) {
            SSL_free(ssl);
            return NULL;
        }
    }
    *in = BIO_new(BIO_s_mem());
    *out = BIO_new(BIO_s_mem());
    if (*in == NULL || *out == NULL) {
        BIO_free(*in);
        BIO_free(*out);
        SSL_free(ssl);
        return NULL;
    }
    /* A drained memory BIO means "wait for more", not end of file. */
    BIO_set_mem_eof_return(*in, -1);
    BIO_set_mem_eof_return(*out, -1);
    SSL_set_bio(ssl, *in, *out);
    SSL_set_connect_state(ssl);
    return ssl;
}

rd_transport_t *rd_transport_open(uv_loop_t *loop, const char *host, int port,
                                  const rd_redis_tls_t *tls, const rd_transport_events_t *ev,
                                  void *arg, char *err, size_t err_len)
{
    rd_transport_t *t = rd_calloc(1, sizeof *t);
    t->loop = loop;
    t->ev = *ev;
    t->arg = arg;
    t->stage = RESOLVING;
    if (tls) {
        ERR_clear_error();
        t->ssl = new_ssl(tls, host, &t->in, &t->out);
        if (t->ssl == NULL) {
            char why[256];
            openssl_reason(why, sizeof why, "bad server name");
            snprintf(err, err_len, "TLS: cannot set up the session: %s", why);
            rd_free(t);
            return NULL;
        }
    }
    snprintf(t->port, sizeof t->port, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    t->resolve.data = t;
    t->refs = 1;
    int rc = uv_getaddrinfo(loop, &t->resolve, on_resolved, host, t->port, &hints);
    if (rc < 0) {
        snprintf(err, err_len, "cannot resolve the name: %s", uv_strerror(rc));
        if (t->ssl) SSL_free(t->ssl);
        rd_free(t);
        return NULL;
    }
    return t;
}

const char *rd_transport_stage(const rd_transport_t *t)
{
    static const char *const names[] = { "resolving", "connecting", "TLS handshake", "open",
                                         "failed" };
    return names[t->stage];
}

void rd_transport_write(rd_transport_t *t, const char *data, size_t len)
{
    if (t->closed || t->stage != OPEN || len == 0) return;
    if (t->ssl == NULL) {
        send_raw(t, data, len);
        return;
    }
    ERR_clear_error();
    int n = SSL_write(t->ssl, data, (int)len);
    if (n <= 0) {
        tls_failure(t, n, "write");
        return;
    }
    pump_out(t);
}

void rd_transport_close(rd_transport_t *t)
{
    if (t->closed) return;
    t->closed = true;
    if (t->stage == RESOLVING) uv_cancel((uv_req_t *)&t->resolve);
    close_tcp(t);
}
