/* config.c - flags and RETRYD_* environment variables. */
#include "retryd/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/limits.h"

long long rd_parse_duration_ms(const char *s)
{
    if (s == NULL || !isdigit((unsigned char)s[0])) return -1;
    errno = 0;
    char *end;
    long long n = strtoll(s, &end, 10);
    if (errno) return -1;
    long long unit;
    if (end[0] == '\0' || (end[0] == 's' && end[1] == '\0')) unit = 1000;
    else if (end[0] == 'm' && end[1] == '\0') unit = 60 * 1000;
    else if (end[0] == 'h' && end[1] == '\0') unit = 3600 * 1000;
    else if (end[0] == 'd' && end[1] == '\0') unit = 86400 * 1000;
    else return -1;
    if (n > LLONG_MAX / unit / 1000) return -1;
    return n * unit;
}

static int parse_int(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s == '\0') return -1;
    errno = 0;
    char *end;
    long long n = strtoll(s, &end, 10);
    if (errno || *end != '\0' || n < min || n > max) return -1;
    *out = n;
    return 0;
}

static int copy_bounded(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap) return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

void rd_config_mask_url(const char *url, char *out, size_t cap)
{
    if (cap == 0) return;
    const char *scheme_end = strstr(url, "://");
    const char *user = scheme_end ? scheme_end + 3 : url;
    const char *at = strrchr(user, '@');
    if (at == NULL) {
        snprintf(out, cap, "%s", url);
        return;
    }
    /* As rd_config_parse_redis_url reads it: user:password@ or password@. */
    const char *colon = memchr(user, ':', (size_t)(at - user));
    size_t keep = colon ? (size_t)(colon - url) + 1 : (size_t)(user - url);
    snprintf(out, cap, "%.*s***%s", (int)keep, url, at);
}

int rd_config_parse_redis_url(rd_config_t *cfg, const char *url)
{
    int tls = strncmp(url, "rediss://", 9) == 0;
    if (!tls && strncmp(url, "redis://", 8) != 0) return -1;
    const char *p = url + (tls ? 9 : 8);
    cfg->redis_tls = tls;
    cfg->redis_user[0] = cfg->redis_password[0] = '\0';
    cfg->redis_db = 0;
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (copy_bounded(cfg->redis_user, sizeof cfg->redis_user, p, (size_t)(colon - p)) ||
                copy_bounded(cfg->redis_password, sizeof cfg->redis_password, colon + 1,
                             (size_t)(at - colon - 1)))
                return -1;
        } else if (copy_bounded(cfg->redis_password, sizeof cfg->redis_password, p,
                                (size_t)(at - p))) {
            return -1;
        }
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    const char *hostport_end = slash ? slash : p + strlen(p);
    const char *colon = memchr(p, ':', (size_t)(hostport_end - p));
    long long port = 6379;
    if (colon) {
        char tmp[8];
        if (copy_bounded(tmp, sizeof tmp, colon + 1, (size_t)(hostport_end - colon - 1)) ||
            parse_int(tmp, 1, 65535, &port))
            return -1;
    }
    const char *host_end = colon ? colon : hostport_end;
    if (host_end == p ||
        copy_bounded(cfg->redis_host, sizeof cfg->redis_host, p, (size_t)(host_end - p)))
        return -1;
    cfg->redis_port = (int)port;
    if (slash && slash[1]) {
        long long db;
        if (parse_int(slash + 1, 0, 1 << 20, &db)) return -1;
        cfg->redis_db = (int)db;
    }
    return 0;
}

/* HOST:PORT into host (cap bytes) and *port. */
static int parse_host_port(const char *v, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(v, ':');
    long long n;
    if (colon == NULL || parse_int(colon + 1, 0, 65535, &n)) return -1;
    if (copy_bounded(host, cap, v, (size_t)(colon - v))) return -1;
    *port = (int)n;
    return 0;
}

static int parse_listen(rd_config_t *cfg, const char *v)
{
    return parse_host_port(v, cfg->listen_host, sizeof cfg->listen_host, &cfg->listen_port);
}

/* ---------------------------------------------------------------- the flags */

/* Each setter applies one flag's value; 0, or -1 when the value is bad. */

/* An integer in min..max into *out. */
static int set_int(const char *v, long long min, long long max, int *out)
{
    long long n;
    if (parse_int(v, min, max, &n)) return -1;
    *out = (int)n;
    return 0;
}

/* A duration of at least min_ms into *out_ms. */
static int set_duration(const char *v, long long min_ms, long long *out_ms)
{
    long long ms = rd_parse_duration_ms(v);
    if (ms < min_ms) return -1;
    *out_ms = ms;
    return 0;
}

static int set_listen(rd_config_t *cfg, const char *v)
{
    return parse_listen(cfg, v);
}

static int set_redis(rd_config_t *cfg, const char *v)
{
    return rd_config_parse_redis_url(cfg, v);
}

/* Seeds, optionally after rediss:// (TLS, as a rediss:// --redis also turns on). */
static int set_redis_cluster(rd_config_t *cfg, const char *v)
{
    cfg->redis_cluster_tls = strncmp(v, "rediss://", 9) == 0;
    if (cfg->redis_cluster_tls) v += 9;
    else if (strncmp(v, "redis://", 8) == 0) v += 8;
    if (*v == '\0' || strchr(v, ':') == NULL) return -1;
    return copy_bounded(cfg->redis_cluster, sizeof cfg->redis_cluster, v, strlen(v));
}

static int set_redis_timeout_ms(rd_config_t *cfg, const char *v)
{
    return set_int(v, 100, 600000, &cfg->redis_timeout_ms);
}

static int set_redis_tls_ca(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->redis_tls_ca, sizeof cfg->redis_tls_ca, v, strlen(v));
}

static int set_redis_tls_cert(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->redis_tls_cert, sizeof cfg->redis_tls_cert, v, strlen(v));
}

static int set_redis_tls_key(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->redis_tls_key, sizeof cfg->redis_tls_key, v, strlen(v));
}

static int set_redis_tls_server_name(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->redis_tls_server_name, sizeof cfg->redis_tls_server_name, v,
                        strlen(v));
}

static int set_redis_tls_insecure(rd_config_t *cfg, const char *v)
{
    if (strcmp(v, "yes") == 0) cfg->redis_tls_insecure = 1;
    else if (strcmp(v, "no") == 0) cfg->redis_tls_insecure = 0;
    else return -1;
    return 0;
}

static int set_allow_shards(rd_config_t *cfg, const char *v)
{
    if (strcmp(v, "yes") == 0) cfg->allow_shards = 1;
    else if (strcmp(v, "no") == 0) cfg->allow_shards = 0;
    else return -1;
    return 0;
}

static int set_prefix(rd_config_t *cfg, const char *v)
{
    if (*v == '\0' || strpbrk(v, "{}") != NULL) return -1;
    return copy_bounded(cfg->prefix, sizeof cfg->prefix, v, strlen(v));
}

static int set_tick_ms(rd_config_t *cfg, const char *v)
{
    return set_int(v, 1, 60000, &cfg->tick_ms);
}

static int set_lease_seconds(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 1, RD_LEASE_SECONDS_MAX, &n)) return -1;
    cfg->lease_ms = n * 1000;
    return 0;
}

static int set_max_body(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 1024, 1LL << 30, &n)) return -1;
    cfg->max_body_bytes = (size_t)n;
    return 0;
}

static int set_idle_timeout(rd_config_t *cfg, const char *v)
{
    return set_duration(v, 1000, &cfg->idle_timeout_ms);
}

static int set_max_connections(rd_config_t *cfg, const char *v)
{
    return set_int(v, 1, 1000000, &cfg->max_connections);
}

static int set_max_pending_body(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 65536, 1LL << 40, &n)) return -1;
    cfg->max_pending_body_bytes = (size_t)n;
    return 0;
}

static int set_max_pending_output(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 65536, 1LL << 40, &n)) return -1;
    cfg->max_pending_output_bytes = (size_t)n;
    return 0;
}

static int set_dead_ttl(rd_config_t *cfg, const char *v)
{
    return set_duration(v, 0, &cfg->dead_ttl_ms);
}

static int set_succeeded_ttl(rd_config_t *cfg, const char *v)
{
    return set_duration(v, 0, &cfg->succeeded_ttl_ms);
}

static int set_series(rd_config_t *cfg, const char *v)
{
    if (strcmp(v, "on") == 0) cfg->series = 1;
    else if (strcmp(v, "off") == 0) cfg->series = 0;
    else return -1;
    return 0;
}

static int set_log_level(rd_config_t *cfg, const char *v)
{
    return rd_log_parse_level(v, &cfg->log_level);
}

static int set_auth_token_file(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->auth_token_file, sizeof cfg->auth_token_file, v, strlen(v));
}

static int set_token_file(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->token_file, sizeof cfg->token_file, v, strlen(v));
}

static int set_alert_url(rd_config_t *cfg, const char *v)
{
    if (*v == '\0') {
        cfg->alert_url[0] = '\0';
        return 0;
    }
    if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) return -1;
    for (const char *c = v; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) return -1;
    return copy_bounded(cfg->alert_url, sizeof cfg->alert_url, v, strlen(v));
}

/* --sqs-listen "" turns the SQS endpoint off (the default). */
static int set_sqs_listen(rd_config_t *cfg, const char *v)
{
    if (*v == '\0') {
        cfg->sqs_listen_host[0] = '\0';
        cfg->sqs_listen_port = -1;
        return 0;
    }
    return parse_host_port(v, cfg->sqs_listen_host, sizeof cfg->sqs_listen_host,
                           &cfg->sqs_listen_port);
}

/* An AWS account id: 12 digits. */
static int set_sqs_account(rd_config_t *cfg, const char *v)
{
    if (strlen(v) != 12 || strspn(v, "0123456789") != 12) return -1;
    return copy_bounded(cfg->sqs_account, sizeof cfg->sqs_account, v, 12);
}

/* A region name as AWS spells them: lowercase letters, digits and '-'. */
static int set_sqs_region(rd_config_t *cfg, const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") != n) return -1;
    return copy_bounded(cfg->sqs_region, sizeof cfg->sqs_region, v, n);
}

static int set_sqs_credentials(rd_config_t *cfg, const char *v)
{
    return copy_bounded(cfg->sqs_credentials, sizeof cfg->sqs_credentials, v, strlen(v));
}

static int set_alert_claim_ms(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 1000, 3600000, &n)) return -1;
    cfg->alert_claim_ms = n;
    return 0;
}

static int set_alert_timeout_ms(rd_config_t *cfg, const char *v)
{
    long long n;
    if (parse_int(v, 100, 600000, &n)) return -1;
    cfg->alert_timeout_ms = n;
    return 0;
}

/* Every flag, in --help order: a new flag is its rd_config_t field, a setter
 * above and a row here. --NAME and RETRYD_<NAME> both set it; the default
 * goes through the setter too (rd_config_defaults) and --help shows it in
 * parentheses. */
static const struct flag {
    const char *name;
    const char *arg;            /* the value's placeholder in --help */
    const char *help;           /* "\n" continues on the next line */
    const char *fallback;       /* the default, as a value; NULL: none */
    int (*set)(rd_config_t *cfg, const char *v);
    bool secret;                /* a URL that may hold a password: masked in errors */
} flags[] = {
    { "listen", "HOST:PORT", "HTTP address", "127.0.0.1:8080", set_listen, false },
    { "redis", "URL",
      "redis://[[user]:password@]host:port[/db]; rediss://\n"
      "for TLS (docs/security.md)", "redis://127.0.0.1:6379", set_redis, true },
    { "redis-cluster", "SEEDS",
      "[rediss://]host:port[,host:port...] of a Redis Cluster;\n"
      "credentials still come from --redis (docs/cluster.md);\n"
      "TLS when either is rediss://", NULL, set_redis_cluster, true },
    { "redis-tls-ca", "FILE",
      "PEM CA certificates the Redis server's certificate\n"
      "must chain to (default: the system store)", NULL, set_redis_tls_ca, false },
    { "redis-tls-cert", "FILE", "PEM client certificate, for mutual TLS", NULL,
      set_redis_tls_cert, false },
    { "redis-tls-key", "FILE", "PEM key of --redis-tls-cert", NULL, set_redis_tls_key, false },
    { "redis-tls-server-name", "NAME",
      "the name the server's certificate must carry, and the\n"
      "SNI sent (default: the host connected to)", NULL, set_redis_tls_server_name, false },
    { "redis-tls-insecure", "yes|no",
      "yes: do not verify the server's certificate (logged)", "no", set_redis_tls_insecure,
      false },
    { "redis-timeout-ms", "N", "a Redis command older than this drops the link", "5000",
      set_redis_timeout_ms, false },
    { "prefix", "NAME", "key prefix", "retryd", set_prefix, false },
    { "tick-ms", "N", "longest sleep of the promotion timer", "250", set_tick_ms, false },
    { "lease-seconds", "N",
      "default lease of a claim, 1-" RD_LIMIT_STR(RD_LEASE_SECONDS_MAX), "30",
      set_lease_seconds, false },
    { "max-body", "BYTES", "largest request body", "1048576", set_max_body, false },
    { "idle-timeout", "DURATION",
      "close a connection without a complete request for this\n"
      "long: idle keep-alive and slow senders", "60s", set_idle_timeout, false },
    { "max-connections", "N", "open HTTP connections at most", "4096", set_max_connections,
      false },
    { "max-pending-body-bytes", "BYTES",
      "request bodies being read, all connections together;\n"
      "past it a new body gets 503 before it is read", "268435456", set_max_pending_body, false },
    { "max-pending-output-bytes", "BYTES",
      "answers queued and not yet taken by their clients, all\n"
      "connections together; past it the connections with the\n"
      "most unread are closed (their claims handed back)", "268435456",
      set_max_pending_output, false },
    { "dead-ttl", "DURATION",
      "keep dead letters this long, 0 forever, where the\n"
      "queue policy sets no dead_ttl; instances sharing a\n"
      "Redis with different values apply either: set\n"
      "fleet-wide retention in the queue policy", "30d", set_dead_ttl, false },
    { "succeeded-ttl", "DURATION",
      "keep succeeded messages this long, 0 forever, where\n"
      "the queue policy sets no succeeded_ttl (fleet-wide:\n"
      "the queue policy, as for --dead-ttl)", "1h", set_succeeded_ttl, false },
    { "series", "on|off",
      "sample each queue's time series about once a minute\n"
      "(off: only readers sample; docs/series.md)", "on", set_series, false },
    { "log-level", "LEVEL", "debug, info, warn or error", "info", set_log_level, false },
    { "auth-token-file", "PATH",
      "require 'Authorization: Bearer <token>' on every route\n"
      "but the public /healthz, /openapi.json, /ui and /ui/*\n"
      "(no data); the token is the file's first line\n"
      "(a request without it gets 401 before its body is read;\n"
      "a body needs it on the public routes too)", NULL,
      set_auth_token_file, false },
    { "token-file", "PATH",
      "scoped tokens, one a line: 'TOKEN ROLES [queue-pattern\n"
      "...]', ROLES of producer,worker,reader,operator,admin\n"
      "(docs/security.md); reread on SIGHUP; with\n"
      "--auth-token-file too, whose token is admin", NULL, set_token_file, false },
    { "alert-url", "URL",
      "POST one JSON event per death to this http(s) URL;\n"
      "instances without it hand theirs over, and any\n"
      "instance delivers to a queue's policy alert_url\n"
      "(docs/dead-letters.md)", NULL, set_alert_url, true },
    { "sqs-listen", "HOST:PORT",
      "serve Amazon SQS's API here too (docs/sqs.md); off\n"
      "unless given; without --sqs-credentials it must be a\n"
      "loopback address", NULL, set_sqs_listen, false },
    { "sqs-account", "ID", "the account in SQS queue URLs and ARNs", "000000000000",
      set_sqs_account, false },
    { "sqs-region", "NAME", "the region in SQS ARNs", "us-east-1", set_sqs_region, false },
    { "sqs-credentials", "PATH",
      "require AWS Signature Version 4 on the SQS endpoint by\n"
      "these keys: one per line, 'ACCESS_KEY_ID SECRET\n"
      "[queue-pattern ...]'", NULL, set_sqs_credentials, false },
    { "alert-claim-ms", "N",
      "an alert another instance left pending this long\n"
      "is claimed back and sent", "30000", set_alert_claim_ms, false },
    { "alert-timeout-ms", "N", "longest alert POST, connect included", "5000",
      set_alert_timeout_ms, false },
    /* Not in --help (help NULL): a policy's shards above 1, while sharding
     * is built step by step (docs/sharding.md "Implementation plan"). */
    { "allow-shards", "yes|no", NULL, "no", set_allow_shards, false },
};

enum { NFLAGS = sizeof flags / sizeof flags[0], HELP_COLUMN = 28 };

static const struct flag *find_flag(const char *name)
{
    for (size_t i = 0; i < NFLAGS; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

/* --help, built from the table once. */
static const char *usage(void)
{
    static char text[8192];
    if (text[0]) return text;
    size_t n = (size_t)snprintf(text, sizeof text, "usage: retryd [options]   (each option is "
                                "also RETRYD_<NAME>, e.g. RETRYD_LISTEN)\n");
    for (size_t i = 0; i < NFLAGS && n < sizeof text; i++) {
        const struct flag *f = &flags[i];
        if (f->help == NULL) continue;
        int used = snprintf(text + n, sizeof text - n, "  --%s %s", f->name, f->arg);
        n += (size_t)used;
        n += (size_t)snprintf(text + n, sizeof text - n, "%*s", used < HELP_COLUMN ?
                              HELP_COLUMN - used : 1, "");
        for (const char *h = f->help; *h && n + 1 < sizeof text; h++) {
            text[n++] = *h;
            if (*h == '\n') n += (size_t)snprintf(text + n, sizeof text - n, "%*s", HELP_COLUMN, "");
        }
        text[n] = '\0';
        if (f->fallback) n += (size_t)snprintf(text + n, sizeof text - n, " (%s)", f->fallback);
        n += (size_t)snprintf(text + n, sizeof text - n, "\n");
    }
    return text;
}

void rd_config_defaults(rd_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NFLAGS; i++) {
        int rc = flags[i].fallback ? flags[i].set(cfg, flags[i].fallback) : 0;
        assert(rc == 0);  /* a default its own setter refuses is a bug in the table */
        (void)rc;
    }
}

/* A bad value as the error shows it: URLs (which may hold a password) masked. */
enum { SHOWN_MAX = 512 };

static void show_value(const struct flag *f, const char *v, char *out, size_t cap)
{
    if (f && f->secret)
        rd_config_mask_url(v, out, cap);
    else
        snprintf(out, cap, "%s", v);
}

int rd_config_load(rd_config_t *cfg, int argc, char **argv, char *err, size_t err_len)
{
    for (size_t i = 0; i < NFLAGS; i++) {
        char env[64] = "RETRYD_";
        size_t j = strlen(env);
        for (const char *c = flags[i].name; *c && j < sizeof env - 1; c++)
            env[j++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
        env[j] = '\0';
        const char *v = getenv(env);
        if (v && flags[i].set(cfg, v) != 0) {
            char shown[SHOWN_MAX];
            show_value(&flags[i], v, shown, sizeof shown);
            snprintf(err, err_len, "bad value for %s: '%s'", env, shown);
            return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            snprintf(err, err_len, "%s", usage());
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, err_len, "unexpected argument '%s'\n%s", arg, usage());
            return -1;
        }
        char name[64];
        const char *value;
        const char *eq = strchr(arg, '=');
        if (eq) {
            if (copy_bounded(name, sizeof name, arg + 2, (size_t)(eq - arg - 2))) goto bad;
            value = eq + 1;
        } else {
            if (copy_bounded(name, sizeof name, arg + 2, strlen(arg + 2))) goto bad;
            if (i + 1 >= argc) {
                snprintf(err, err_len, "option --%s needs a value", name);
                return -1;
            }
            value = argv[++i];
        }
        const struct flag *f = find_flag(name);
        if (f == NULL || f->set(cfg, value) != 0) {
            char shown[SHOWN_MAX];
            show_value(f, value, shown, sizeof shown);
            snprintf(err, err_len, "bad option --%s '%s'\n%s", name, shown, usage());
            return -1;
        }
        continue;
bad:
        snprintf(err, err_len, "bad option '%s'", arg);
        return -1;
    }
    bool tls = cfg->redis_tls || (cfg->redis_cluster[0] && cfg->redis_cluster_tls);
    if (!tls && (cfg->redis_tls_ca[0] || cfg->redis_tls_cert[0] || cfg->redis_tls_key[0] ||
                 cfg->redis_tls_server_name[0] || cfg->redis_tls_insecure)) {
        snprintf(err, err_len, "--redis-tls-* options need a rediss:// --redis "
                 "(or --redis-cluster rediss://...)");
        return -1;
    }
    if (!cfg->redis_tls_cert[0] != !cfg->redis_tls_key[0]) {
        snprintf(err, err_len, "--redis-tls-cert and --redis-tls-key go together");
        return -1;
    }
    return 0;
}
