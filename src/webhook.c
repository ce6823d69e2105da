/* webhook.c - libcurl's multi-socket interface on the libuv loop: libcurl
 * says which sockets to watch (CURLMOPT_SOCKETFUNCTION -> a uv_poll_t each)
 * and when to time out (CURLMOPT_TIMERFUNCTION -> one uv_timer_t); both
 * report back with curl_multi_socket_action. No thread, no blocking call. */
#include "retryd/webhook.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

typedef struct request {
    struct rd_webhook *w;
    CURL *easy;
    struct curl_slist *headers;
    rd_webhook_cb cb;
    void *arg;
    char error[CURL_ERROR_SIZE];
    struct request *prev, *next;
} request_t;

/* One socket libcurl asked us to watch. */
typedef struct sock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct rd_webhook *w;
    struct sock *prev, *next;
} sock_t;

struct rd_webhook {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    request_t *requests;        /* in flight */
    size_t in_flight;
    sock_t *socks;              /* watched */
    size_t closing_handles;     /* uv_close calls not yet completed */
    bool closing;
    void (*on_closed)(void *arg);
    void *on_closed_arg;
};

static void maybe_free(rd_webhook_t *w)
{
    if (!w->closing || w->closing_handles > 0) return;
    void (*cb)(void *) = w->on_closed;
    void *arg = w->on_closed_arg;
    rd_free(w);
    if (cb) cb(arg);
}

static void on_handle_closed(uv_handle_t *h)
{
    rd_webhook_t *w;
    if (h->type == UV_POLL) {
        sock_t *s = h->data;
        w = s->w;
        rd_free(s);
    } else {
        w = h->data;
    }
    w->closing_handles--;
    maybe_free(w);
}

static void sock_close(rd_webhook_t *w, sock_t *s)
{
    if (s->prev) s->prev->next = s->next;
    else w->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    w->closing_handles++;
    uv_close((uv_handle_t *)&s->poll, on_handle_closed);
}

static void request_free(request_t *r)
{
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    rd_free(r);
}

static void request_unlink(rd_webhook_t *w, request_t *r)
{
    if (r->prev) r->prev->next = r->next;
    else w->requests = r->next;
    if (r->next) r->next->prev = r->prev;
    w->in_flight--;
}

/* Completes every finished transfer: its callback, then its handle goes. */
static void check_done(rd_webhook_t *w)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(w->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *easy = msg->easy_handle;
        CURLcode rc = msg->data.result;
        request_t *r = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
        rd_webhook_result_t res = { 0, NULL };
        if (rc == CURLE_OK) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &res.status);
        else res.error = r->error[0] ? r->error : curl_easy_strerror(rc);
        curl_multi_remove_handle(w->multi, easy);
        request_unlink(w, r);
        r->cb(&res, r->arg);
        request_free(r);
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    sock_t *s = h->data;
    rd_webhook_t *w = s->w;
    int flags = 0;
    if (status < 0) flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(w->multi, s->fd, flags, &running);
    check_done(w);
}

static void on_timeout(uv_timer_t *t)
{
    rd_webhook_t *w = t->data;
    int running;
    curl_multi_socket_action(w->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(w);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    rd_webhook_t *w = userp;
    sock_t *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(w->multi, fd, NULL);
            sock_close(w, s);
        }
        return 0;
    }
    if (s == NULL) {
        s = rd_calloc(1, sizeof *s);
        s->fd = fd;
        s->w = w;
        if (uv_poll_init_socket(w->loop, &s->poll, fd) != 0) {
            rd_free(s);
            return -1;
        }
        s->poll.data = s;
        s->next = w->socks;
        if (w->socks) w->socks->prev = s;
        w->socks = s;
        curl_multi_assign(w->multi, fd, s);
    }
    int events = 0;
    if (what & CURL_POLL_IN) events |= UV_READABLE;
    if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static int on_timer_set(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    rd_webhook_t *w = userp;
    if (timeout_ms < 0) uv_timer_stop(&w->timer);
    else uv_timer_start(&w->timer, on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

static size_t discard(char *ptr, size_t size, size_t n, void *arg)
{
    (void)ptr;
    (void)arg;
    return size * n;
}

rd_webhook_t *rd_webhook_new(uv_loop_t *loop)
{
    static bool initialised;
    if (!initialised) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return NULL;
        initialised = true;
    }
    rd_webhook_t *w = rd_calloc(1, sizeof *w);
    w->loop = loop;
    w->multi = curl_multi_init();
    if (w->multi == NULL) {
        rd_free(w);
        return NULL;
    }
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(w->multi, CURLMOPT_SOCKETDATA, w);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
    curl_multi_setopt(w->multi, CURLMOPT_TIMERDATA, w);
    return w;
}

int rd_webhook_post(rd_webhook_t *w, const char *url, const char *body, size_t len,
                    long timeout_ms, rd_webhook_cb cb, void *arg)
{
    if (w->closing) return -1;
    request_t *r = rd_calloc(1, sizeof *r);
    r->w = w;
    r->cb = cb;
    r->arg = arg;
    r->easy = curl_easy_init();
    if (r->easy == NULL) {
        rd_free(r);
        return -1;
    }
    r->headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* No "Expect: 100-continue" round trip for a body this small. */
    r->headers = curl_slist_append(r->headers, "Expect:");
    CURL *e = r->easy;
    bool ok = r->headers != NULL && curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_USERAGENT, "retryd") == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r) == CURLE_OK &&
              curl_multi_add_handle(w->multi, e) == CURLM_OK;
    if (!ok) {
        request_free(r);
        return -1;
    }
    r->next = w->requests;
    if (w->requests) w->requests->prev = r;
    w->requests = r;
    w->in_flight++;
    return 0;
}

void rd_webhook_abort(rd_webhook_t *w)
{
    while (w->requests) {
        request_t *r = w->requests;
        curl_multi_remove_handle(w->multi, r->easy);
        request_unlink(w, r);
        request_free(r);
    }
}

void rd_webhook_close(rd_webhook_t *w, void (*on_closed)(void *arg), void *arg)
{
    w->closing = true;
    w->on_closed = on_closed;
    w->on_closed_arg = arg;
    rd_webhook_abort(w);
    curl_multi_cleanup(w->multi);
    w->multi = NULL;
    while (w->socks) sock_close(w, w->socks);
    uv_timer_stop(&w->timer);
    w->closing_handles++;
    uv_close((uv_handle_t *)&w->timer, on_handle_closed);
}
