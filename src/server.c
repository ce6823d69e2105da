/* server.c - retryd's main: owns the loop, starts the modules in dependency
 * order, rereads --token-file on SIGHUP, and stops them in reverse on
 * SIGINT/SIGTERM:
 *   stop accepting, stop the promoter and the alert sender, answer parked
 *   long-polls -> drain
 *   in-flight requests (at most 5 s; past that the Redis link is dropped so
 *   every waiting request is answered) -> free the long-poll waiters (the
 *   handlers use them until the last request is answered) -> close Redis ->
 *   close the signal handles -> exit 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "retryd/alerts.h"
#include "retryd/alloc.h"
#include "retryd/api.h"
#include "retryd/auth.h"
#include "retryd/tokens.h"
#include "retryd/backend.h"
#include "retryd/coalesce.h"
#include "retryd/enqueue_lines.h"
#include "retryd/config.h"
#include "retryd/dlq.h"
#include "retryd/moves.h"
#include "retryd/http.h"
#include "retryd/log.h"
#include "retryd/promoter.h"
#include "retryd/redis.h"
#include "retryd/store.h"
#include "retryd/durability.h"
#include "retryd/fanout.h"
#include "retryd/lost_claims.h"
#include "retryd/registry.h"
#include "retryd/sqs.h"
#include "retryd/waiters.h"

extern const char rd_lua_library[];

enum { DRAIN_TIMEOUT_MS = 5000 };

typedef struct server {
    uv_loop_t *loop;
    rd_config_t cfg;
    rd_backend_t *redis;
    rd_store_t *store;
    rd_registry_t *registry;      /* above the store, freed with it */
    rd_lost_claims_t *lost_claims;
    rd_fanout_t *fanout;
    rd_coalescer_t *coalescer;    /* settle-and-claim requests sent together */
    rd_enqueue_lines_t *enqueues; /* single enqueues of one queue sent together */
    rd_api_t api;
    rd_http_server_t *http;
    rd_promoter_t *promoter;
    rd_waiters_t *waiters;
    rd_alerts_t *alerts;          /* NULL without --alert-url until a policy alert_url needs it */
    rd_dlq_t *dlq;                /* moves deaths to their dead_letter_queue */
    rd_moves_t *moves;            /* message move tasks (docs/sqs.md) */
    rd_sqs_t *sqs;                /* --sqs-listen's endpoint, NULL without it */
    int servers_draining;         /* the HTTP API's and the SQS endpoint's */
    bool alerts_failed;           /* libcurl could not be set up: not tried again */
    char *admin_token;            /* --auth-token-file's, or NULL */
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t drain_timer;
    bool stopping, http_drained, promoter_stopped, waiters_closed, alerts_stopped, redis_closing;
} server_t;

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

static void on_redis_closed(void *arg)
{
    server_t *s = arg;
    s->redis = NULL;
    /* A response still being written may yet report that it was not
     * delivered (a shutdown past its deadline): no store to release to. */
    s->api.store = NULL;
    if (s->sqs) rd_sqs_forget_store(s->sqs);
    s->api.coalescer = NULL;
    s->api.enqueues = NULL;
    s->api.fanout = NULL;
    rd_coalescer_free(s->coalescer);
    s->coalescer = NULL;
    rd_enqueue_lines_free(s->enqueues);
    s->enqueues = NULL;
    rd_fanout_free(s->fanout);
    s->fanout = NULL;
    rd_lost_claims_free(s->lost_claims);
    s->lost_claims = NULL;
    rd_dlq_free(s->dlq);
    s->dlq = NULL;
    rd_moves_free(s->moves);
    s->moves = NULL;
    rd_registry_free(s->registry);
    s->registry = NULL;
    rd_store_free(s->store);
    s->store = NULL;
    uv_close((uv_handle_t *)&s->sigint, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigterm, on_handle_closed);
    uv_close((uv_handle_t *)&s->sighup, on_handle_closed);
    /* Closing the handles restores the default action; a repeated Ctrl-C or
     * SIGTERM from now until exit must not kill a clean shutdown. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    uv_close((uv_handle_t *)&s->drain_timer, on_handle_closed);
    rd_info("retryd: stopped");
}

/* Redis goes last: the drained requests and the promoter needed it. */
static void maybe_close_redis(server_t *s, bool force)
{
    if (s->redis == NULL) return;
    if (force) {
        rd_backend_close(s->redis, true, on_redis_closed, s);
        s->redis_closing = true;
        return;
    }
    if (!s->http_drained || !s->promoter_stopped || !s->waiters_closed || !s->alerts_stopped ||
        s->redis_closing)
        return;
    s->redis_closing = true;
    uv_timer_stop(&s->drain_timer);
    rd_backend_close(s->redis, false, on_redis_closed, s);
}

static void on_waiters_closed(void *arg);

/* No handler runs any more: the waiters they borrowed can go. */
static void on_servers_drained(server_t *s)
{
    if (--s->servers_draining > 0) return;
    s->http_drained = true;
    rd_waiters_close(s->waiters, on_waiters_closed, s);
}

static void on_http_drained(void *arg)
{
    server_t *s = arg;
    s->http = NULL;
    s->api.http = NULL;
    on_servers_drained(s);
}

static void on_sqs_drained(void *arg)
{
    server_t *s = arg;
    s->sqs = NULL;
    s->api.sqs = NULL;
    on_servers_drained(s);
}

static void on_promoter_stopped(void *arg)
{
    server_t *s = arg;
    s->promoter = NULL;
    s->promoter_stopped = true;
    maybe_close_redis(s, false);
}

static void on_alerts_stopped(void *arg)
{
    server_t *s = arg;
    s->alerts = NULL;
    s->api.alerts = NULL;
    s->alerts_stopped = true;
    maybe_close_redis(s, false);
}

static void on_waiters_closed(void *arg)
{
    server_t *s = arg;
    s->waiters = NULL;
    s->api.waiters = NULL;
    s->waiters_closed = true;
    maybe_close_redis(s, false);
}

static void on_command_link_ready(void *arg)
{
    server_t *s = arg;
    if (s->store) rd_durability_check(s->store);
}

static void on_claimable(rd_store_queue_t queue, void *arg)
{
    server_t *s = arg;
    if (s->waiters) rd_waiters_notify(s->waiters, queue);
}

/* Starts the alert sender: at start with --alert-url; without it, the first
 * time a tick finds alerts to a queue's own alert_url (docs/dead-letters.md
 * "Alert webhooks"), so an instance of a fleet without alerts never starts it. */
static bool start_alerts(server_t *s)
{
    if (s->alerts) return true;
    if (s->alerts_failed) return false;
    rd_alerts_options_t ao = {
        .url = s->cfg.alert_url[0] ? s->cfg.alert_url : NULL,
        .claim_ms = s->cfg.alert_claim_ms, .timeout_ms = s->cfg.alert_timeout_ms,
    };
    s->alerts = rd_alerts_start(s->loop, s->store, &ao);
    s->api.alerts = s->alerts;
    if (s->alerts == NULL) s->alerts_failed = true;
    return s->alerts != NULL;
}

static void on_moving(rd_store_queue_t queue, void *arg)
{
    server_t *s = arg;
    if (s->dlq) rd_dlq_move(s->dlq, queue);
}

static void on_alerts(rd_store_queue_t queue, void *arg)
{
    server_t *s = arg;
    if (s->stopping) return;
    if (start_alerts(s)) rd_alerts_wake(s->alerts, queue);
    else rd_warn("alerts: cannot set up libcurl; the alerts of queue %.*s wait",
                 (int)queue.len, queue.name);
}

static void on_promoter_round(void *arg)
{
    server_t *s = arg;
    /* What failed to reach Redis since the last round: lost claims' leases
     * released, then the registrations owed. */
    if (s->lost_claims) rd_lost_claims_flush(s->lost_claims);
    if (s->registry) rd_registry_flush_owed(s->registry);
    if (s->waiters) rd_waiters_poll_if_deaf(s->waiters);
    /* Message move tasks whose runner died are taken over here. */
    if (s->moves && !s->stopping) rd_moves_look(s->moves);
}

static void on_drain_timeout(uv_timer_t *t)
{
    server_t *s = t->data;
    rd_warn("retryd: requests still in flight after %d ms; dropping the Redis link",
            DRAIN_TIMEOUT_MS);
    maybe_close_redis(s, true);
}

/* The API's tokens: --token-file's, with --auth-token-file's first as admin;
 * NULL with neither (the API is open). NULL with why[] set when the token
 * file is refused. */
static rd_tokens_t *load_tokens(const server_t *s, char *why, size_t why_len, bool *failed)
{
    *failed = false;
    rd_tokens_t *set = NULL;
    if (s->cfg.token_file[0]) {
        set = rd_tokens_load(s->cfg.token_file, why, why_len);
        if (set == NULL) {
            *failed = true;
            return NULL;
        }
    }
    if (s->admin_token) {
        if (set == NULL) set = rd_tokens_new();
        rd_tokens_add_first(set, s->admin_token, strlen(s->admin_token), RD_ROLE_ADMIN);
    }
    return set;
}

/* SIGHUP: a valid token file replaces the set at once (requests in flight
 * finish with the old one); an invalid one keeps it (docs/security.md
 * "Tokens"). */
static void on_sighup(uv_signal_t *sig, int signum)
{
    (void)signum;
    server_t *s = sig->data;
    if (!s->cfg.token_file[0]) {
        rd_info("retryd: SIGHUP: no --token-file to reread");
        return;
    }
    char why[600];
    bool failed;
    rd_tokens_t *set = load_tokens(s, why, sizeof why, &failed);
    if (failed) {
        rd_error("retryd: SIGHUP: kept the previous tokens: %s", why);
        return;
    }
    size_t n = rd_tokens_count(set) - (s->admin_token ? 1 : 0);
    rd_api_set_tokens(&s->api, set);
    rd_info("retryd: SIGHUP: %zu token(s) in %s now", n, s->cfg.token_file);
}

static void on_signal(uv_signal_t *sig, int signum)
{
    server_t *s = sig->data;
    if (s->stopping) return;
    s->stopping = true;
    rd_info("retryd: %s received, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_timer_start(&s->drain_timer, on_drain_timeout, DRAIN_TIMEOUT_MS, 0);
    rd_promoter_stop(s->promoter, on_promoter_stopped, s);
    rd_dlq_stop(s->dlq);
    rd_moves_stop(s->moves);
    if (s->alerts) rd_alerts_stop(s->alerts, on_alerts_stopped, s);
    else s->alerts_stopped = true;
    rd_waiters_stop(s->waiters);
    s->servers_draining = s->sqs ? 2 : 1;
    rd_http_server_stop(s->http, on_http_drained, s);
    if (s->sqs) rd_sqs_stop(s->sqs, on_sqs_drained, s);
}

/* A start that cannot go on: what was made is closed, in reverse. */
static void abandon_start(server_t *s, char *token)
{
    if (s->alerts) rd_alerts_stop(s->alerts, NULL, NULL);
    rd_waiters_close(s->waiters, NULL, NULL);
    rd_backend_close(s->redis, true, NULL, NULL);
    rd_coalescer_free(s->coalescer);
    rd_enqueue_lines_free(s->enqueues);
    rd_moves_free(s->moves);
    rd_fanout_free(s->fanout);
    rd_lost_claims_free(s->lost_claims);
    rd_registry_free(s->registry);
    rd_store_free(s->store);
    uv_run(s->loop, UV_RUN_DEFAULT);
    uv_loop_close(s->loop);
    rd_api_set_tokens(&s->api, NULL);
    rd_free(token);
}

int main(int argc, char **argv)
{
    rd_alloc_init();
    signal(SIGPIPE, SIG_IGN);
    server_t s;
    memset(&s, 0, sizeof s);
    rd_config_defaults(&s.cfg);
    char err[8192];  /* --help is written here whole */
    int rc = rd_config_load(&s.cfg, argc, argv, err, sizeof err);
    if (rc != 0) {
        fprintf(rc > 0 ? stdout : stderr, "%s%s", err, rc > 0 ? "" : "\n");
        return rc > 0 ? 0 : 2;
    }
    rd_log_set_level(s.cfg.log_level);
    char *token = NULL;
    if (s.cfg.auth_token_file[0]) {
        token = rd_auth_load_token(s.cfg.auth_token_file, err, sizeof err);
        if (token == NULL) {
            fprintf(stderr, "retryd: %s\n", err);
            return 2;
        }
    }
    s.admin_token = token;
    bool tokens_failed;
    s.api.tokens = load_tokens(&s, err, sizeof err, &tokens_failed);
    if (tokens_failed) {
        fprintf(stderr, "retryd: %s\n", err);
        rd_free(token);
        return 2;
    }
    s.loop = uv_default_loop();
    /* rediss:// (docs/security.md): one TLS context for every link. */
    rd_redis_tls_t *tls = NULL;
    if (s.cfg.redis_tls || (s.cfg.redis_cluster[0] && s.cfg.redis_cluster_tls)) {
        rd_redis_tls_options_t to = {
            .ca_file = s.cfg.redis_tls_ca, .cert_file = s.cfg.redis_tls_cert,
            .key_file = s.cfg.redis_tls_key, .server_name = s.cfg.redis_tls_server_name,
            .insecure = s.cfg.redis_tls_insecure != 0,
        };
        tls = rd_redis_tls_new(&to, err, sizeof err);
        if (tls == NULL) {
            fprintf(stderr, "retryd: %s\n", err);
            rd_free(token);
            return 2;
        }
    }

    rd_redis_options_t ro = {
        .host = s.cfg.redis_host, .port = s.cfg.redis_port, .username = s.cfg.redis_user,
        .password = s.cfg.redis_password, .db = s.cfg.redis_db,
        .timeout_ms = s.cfg.redis_timeout_ms, .library = rd_lua_library,
        .on_ready = on_command_link_ready, .on_ready_arg = &s, .tls = tls,
    };
    s.redis = rd_backend_start(s.loop, &ro, s.cfg.redis_cluster);
    if (s.redis == NULL) {
        char shown[sizeof s.cfg.redis_cluster];
        rd_config_mask_url(s.cfg.redis_cluster, shown, sizeof shown);
        fprintf(stderr, "retryd: bad --redis-cluster '%s'\n", shown);
        rd_api_set_tokens(&s.api, NULL);
        rd_free(token);
        return 2;
    }
    s.store = rd_store_new(s.loop, s.redis, s.cfg.prefix);
    rd_store_set_retention(s.store, s.cfg.dead_ttl_ms, s.cfg.succeeded_ttl_ms);
    rd_store_set_series(s.store, s.cfg.series != 0);
    /* Long-poll wake-ups: a pub/sub link to the Redis (or any cluster node). */
    char notify_host[256];
    rd_redis_options_t no = ro;
    rd_backend_notify_address(s.redis, notify_host, sizeof notify_host, &no.port);
    no.host = notify_host;
    s.waiters = rd_waiters_new(s.loop, s.store, &no, s.cfg.prefix);
    if (s.cfg.alert_url[0]) {
        if (!start_alerts(&s)) {
            rd_error("retryd: cannot set up libcurl for --alert-url");
            rd_waiters_close(s.waiters, NULL, NULL);
            rd_backend_close(s.redis, true, NULL, NULL);
            rd_store_free(s.store);
            uv_run(s.loop, UV_RUN_DEFAULT);
            uv_loop_close(s.loop);
            rd_api_set_tokens(&s.api, NULL);
            rd_free(token);
            return 1;
        }
    }
    /* Every instance looks for alerts: of queues with their own alert_url
     * always, of the rest while the fleet has an --alert-url instance. */
    rd_store_set_alerts(s.store, s.cfg.alert_claim_ms, s.cfg.alert_url[0] != '\0');
    s.registry = rd_registry_new(s.loop, s.store, s.cfg.series != 0);
    s.lost_claims = rd_lost_claims_new(s.store);
    s.fanout = rd_fanout_new(s.loop, s.store, s.registry);
    s.coalescer = rd_coalescer_new(s.store);
    s.enqueues = rd_enqueue_lines_new(s.store);
    s.api.store = s.store;
    s.api.fanout = s.fanout;
    s.api.coalescer = s.coalescer;
    s.api.enqueues = s.enqueues;
    s.api.waiters = s.waiters;
    s.api.alerts = s.alerts;
    s.api.cfg = &s.cfg;

    s.moves = rd_moves_new(s.loop, s.store);
    if (s.cfg.sqs_listen_host[0]) {
        rd_sqs_options_t so = {
            .host = s.cfg.sqs_listen_host, .port = s.cfg.sqs_listen_port,
            .account = s.cfg.sqs_account, .region = s.cfg.sqs_region,
            .credentials = s.cfg.sqs_credentials, .default_lease_ms = s.cfg.lease_ms,
            .max_connections = (size_t)s.cfg.max_connections,
            .idle_timeout_ms = (uint64_t)s.cfg.idle_timeout_ms,
            .max_pending_body_bytes = s.cfg.max_pending_body_bytes,
            .max_pending_output_bytes = s.cfg.max_pending_output_bytes, .store = s.store,
            .coalescer = s.coalescer, .enqueues = s.enqueues, .waiters = s.waiters, .moves = s.moves,
        };
        char why[512];
        s.sqs = rd_sqs_start(s.loop, &so, why, sizeof why);
        if (s.sqs == NULL) {
            /* Refused as a bad flag is (nothing served yet). */
            rd_error("retryd: SQS endpoint: %s", why);
            abandon_start(&s, token);
            return 2;
        }
        s.api.sqs = s.sqs;
        rd_info("retryd: SQS endpoint on http://%s:%d (account %s, region %s%s)",
                s.cfg.sqs_listen_host, rd_sqs_port(s.sqs), s.cfg.sqs_account, s.cfg.sqs_region,
                s.cfg.sqs_credentials[0] ? ", Signature Version 4 required" : "");
    }


    rd_http_options_t ho = {
        .host = s.cfg.listen_host, .port = s.cfg.listen_port,
        .max_body_bytes = s.cfg.max_body_bytes, .handler = rd_api_handle, .handler_ctx = &s.api,
        .max_connections = (size_t)s.cfg.max_connections,
        .idle_timeout_ms = (uint64_t)s.cfg.idle_timeout_ms,
        .max_pending_body_bytes = s.cfg.max_pending_body_bytes,
        .max_pending_output_bytes = s.cfg.max_pending_output_bytes,
        .on_head = rd_api_check_head,
    };
    rc = rd_http_server_start(s.loop, &ho, &s.http);
    if (rc != 0) {
        rd_error("retryd: cannot listen on %s:%d: %s", s.cfg.listen_host, s.cfg.listen_port,
                 uv_strerror(rc));
        if (s.sqs) rd_sqs_stop(s.sqs, NULL, NULL);
        abandon_start(&s, token);
        return 1;
    }
    s.api.http = s.http;
    if (s.cfg.redis_cluster[0])
        rd_info("retryd: listening on http://%s:%d, Redis Cluster %s, prefix %s",
                s.cfg.listen_host, rd_http_server_port(s.http), s.cfg.redis_cluster, s.cfg.prefix);
    else
        rd_info("retryd: listening on http://%s:%d, Redis %s:%d, prefix %s", s.cfg.listen_host,
                rd_http_server_port(s.http), s.cfg.redis_host, s.cfg.redis_port, s.cfg.prefix);

    rd_promoter_options_t po = {
        .tick_ms = s.cfg.tick_ms, .batch = 500, .dead_ttl_ms = s.cfg.dead_ttl_ms,
        .succeeded_ttl_ms = s.cfg.succeeded_ttl_ms, .on_claimable = on_claimable,
        .on_claimable_arg = &s, .on_round = on_promoter_round, .on_round_arg = &s,
        .on_alerts = on_alerts, .on_alerts_arg = &s, .alert_url = s.cfg.alert_url[0] != '\0',
        .on_moving = on_moving, .on_moving_arg = &s,
    };
    s.dlq = rd_dlq_new(s.store);
    s.promoter = rd_promoter_start(s.loop, s.store, &po);

    uv_signal_init(s.loop, &s.sigint);
    uv_signal_init(s.loop, &s.sigterm);
    uv_signal_init(s.loop, &s.sighup);
    uv_timer_init(s.loop, &s.drain_timer);
    s.sigint.data = s.sigterm.data = s.sighup.data = s.drain_timer.data = &s;
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);
    uv_signal_start(&s.sighup, on_sighup, SIGHUP);

    uv_run(s.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(s.loop);
    if (rc != 0) rd_warn("retryd: loop closed with handles open: %s", uv_strerror(rc));
    rd_buf_free(&s.api.body);
    rd_api_set_tokens(&s.api, NULL);
    rd_free(token);
    rd_redis_tls_free(tls);
    return 0;
}
