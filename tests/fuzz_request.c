/* fuzz_request.c - libFuzzer harness over the request path: raw bytes go
 * through the real HTTP server (llhttp), the router, validation and the JSON
 * and problem writers, as a client's bytes would.
 *
 * The first byte picks the mode:
 *   even: the rest is written to a connection the server adopts (one end of
 *         a socketpair); the loop runs until the server has answered and
 *         closed it. With bit 1 set (0x02) the server is one that needs the
 *         bearer token "fuzz-token" (refused at the headers, body unread)
 *         and holds at most 2048 bytes of bodies at once. The store's Redis link never connects, so every route
 *         that reaches Redis answers 503: everything before it is exercised.
 *   odd:  the rest is split at the first NUL into a path and a body that go
 *         straight to the router and to every request parser (faster).
 * A connection that neither closes nor answers within the iteration bound is
 * a hang and aborts the run. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "retryd/alloc.h"
#include "retryd/api.h"
#include "retryd/http.h"
#include "retryd/log.h"
#include "retryd/policy.h"
#include "retryd/request.h"
#include "retryd/router.h"
#include "retryd/tokens.h"

extern const char rd_lua_library[];

static uv_loop_t *loop;
static rd_http_server_t *server;
static rd_http_server_t *auth_server;
static rd_api_t api;
static rd_api_t auth_api;
static rd_config_t cfg;

static void setup_once(void)
{
    rd_alloc_init();
    rd_log_set_level(RD_LOG_ERROR + 1);
    loop = uv_default_loop();
    rd_config_defaults(&cfg);
    cfg.max_body_bytes = 4096;
    /* Port 1 on loopback refuses: the link stays down, no Redis is needed. */
    rd_redis_options_t ro = { .host = "127.0.0.1", .port = 1, .timeout_ms = 1000,
                              .library = rd_lua_library };
    rd_backend_t *redis = rd_backend_start(loop, &ro, NULL);
    api.store = rd_store_new(loop, redis, "fuzz");
    api.fanout = rd_fanout_new(loop, api.store, rd_registry_new(loop, api.store, true));
    api.cfg = &cfg;
    rd_http_options_t ho = { .host = "127.0.0.1", .port = 0, .max_body_bytes = 4096,
                             .on_head = rd_api_check_head, .handler = rd_api_handle,
                             .handler_ctx = &api };
    if (rd_http_server_start(loop, &ho, &server) != 0) abort();
    auth_api = api;
    /* "fuzz-token" may do anything; "fuzz-reader" reads queues "f*" only. */
    auth_api.tokens = rd_tokens_new();
    rd_tokens_add_first(auth_api.tokens, "fuzz-reader", 11, RD_ROLE_READER);
    rd_tokens_add_first(auth_api.tokens, "fuzz-token", 10, RD_ROLE_ADMIN);
    ho.handler_ctx = &auth_api;
    ho.max_pending_body_bytes = 2048;
    if (rd_http_server_start(loop, &ho, &auth_server) != 0) abort();
}

static void fuzz_http(rd_http_server_t *srv, const uint8_t *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    if (rd_http_server_adopt(srv, sv[0]) != 0) abort();
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    bool write_closed = false;
    char sink[65536];
    for (int round = 0; round < 20000; round++) {
        if (sent < size) {
            ssize_t n = write(sv[1], data + sent, size - sent);
            if (n > 0) sent += (size_t)n;
        } else if (!write_closed) {
            shutdown(sv[1], SHUT_WR);
            write_closed = true;
        }
        uv_run(loop, UV_RUN_NOWAIT);
        ssize_t n = read(sv[1], sink, sizeof sink);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(sv[1]);
            /* Let the server finish closing its end. */
            for (int i = 0; i < 8; i++) uv_run(loop, UV_RUN_NOWAIT);
            return;
        }
    }
    fprintf(stderr, "fuzz: the server neither answered nor closed: a hang\n");
    abort();
}

static void fuzz_parsers(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t path_len = nul ? (size_t)(nul - text) : size;
    const char *body = nul ? nul + 1 : "";
    size_t body_len = nul ? size - path_len - 1 : 0;

    rd_route_match_t m;
    for (int method = RD_HTTP_GET; method <= RD_HTTP_OPTIONS; method++) {
        rd_router_match(rd_api_routes, rd_api_route_count, (rd_http_method_t)method, text,
                        path_len, &m);
        if (m.queue) {
            rd_field_errors_t errs = { .count = 0 };
            rd_request_queue_name(m.queue, m.queue_len, &errs);
        }
        rd_route_match_free(&m);
    }
    rd_field_errors_t errs = { .count = 0 };
    rd_enqueue_req_t e;
    rd_req_result_t er = rd_request_enqueue(body, body_len, &e, &errs);
    if (er == RD_REQ_OK) rd_request_free(e.doc);
    if (er == RD_REQ_BATCH) {   /* a batch: every item checked, freed whatever the outcome */
        rd_enqueue_batch_req_t b;
        errs.count = 0;
        if (rd_request_enqueue_batch(&e, &b, &errs) == RD_REQ_OK) rd_request_enqueue_batch_free(&b);
    }
    errs.count = 0;
    rd_claim_req_t c;
    if (rd_request_claim(body, body_len, text, path_len, 30000, &c, &errs) == RD_REQ_OK)
        rd_request_free(c.doc);
    rd_settle_req_t s;
    errs.count = 0;
    if (rd_request_fail(body, body_len, &s, &errs) == RD_REQ_OK) rd_request_free(s.doc);
    errs.count = 0;
    if (rd_request_extend(body, body_len, 30000, &s, &errs) == RD_REQ_OK) rd_request_free(s.doc);
    errs.count = 0;
    if (rd_request_snooze(body, body_len, &s, &errs) == RD_REQ_OK) rd_request_free(s.doc);
    rd_ack_req_t *ack = rd_malloc(sizeof *ack);
    errs.count = 0;
    if (rd_request_ack(body, body_len, ack, &errs) == RD_REQ_OK) rd_request_free(ack->doc);
    rd_free(ack);
    rd_replay_req_t r;
    errs.count = 0;
    if (rd_request_replay(body, body_len, &r, &errs) == RD_REQ_OK) rd_request_replay_free(&r);
    rd_list_req_t l;
    errs.count = 0;
    rd_request_list(text, path_len, &l, &errs);
    rd_groups_req_t g;
    errs.count = 0;
    rd_request_groups(text, path_len, &g, &errs);
    rd_policy_t p;
    errs.count = 0;
    if (rd_request_policy(body, body_len, &p, &errs) == RD_REQ_OK) rd_policy_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup_once();
        ready = true;
    }
    if (size == 0) return 0;
    if (data[0] % 2 == 0) fuzz_http(data[0] & 2 ? auth_server : server, data + 1, size - 1);
    else fuzz_parsers(data + 1, size - 1);
    return 0;
}
