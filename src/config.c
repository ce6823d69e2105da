/* config.c - flags and RETRYD_* environment variables. */
#include "retryd/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE \
    "usage: retryd [options]   (each option is also RETRYD_<NAME>, e.g. RETRYD_LISTEN)\n" \
    "  --listen HOST:PORT        HTTP address (127.0.0.1:8080)\n" \
    "  --redis URL               redis://[[user]:password@]host:port[/db] (redis://127.0.0.1:6379)\n" \
    "  --redis-cluster SEEDS     host:port[,host:port...] of a Redis Cluster; credentials\n" \
    "                            still come from --redis (docs/cluster.md)\n" \
    "  --redis-timeout-ms N      a Redis command older than this drops the link (5000)\n" \
    "  --prefix NAME             key prefix (retryd)\n" \
    "  --tick-ms N               longest sleep of the promotion timer (250)\n" \
    "  --lease-seconds N         default lease of a claim, 1-43200 (30)\n" \
    "  --max-body BYTES          largest request body (1048576)\n" \
    "  --idle-timeout DURATION   close a connection without a complete request for this\n" \
    "                            long: idle keep-alive and slow senders (60s)\n" \
    "  --max-connections N       open HTTP connections at most (4096)\n" \
    "  --dead-ttl DURATION       keep dead letters this long, 0 forever (30d)\n" \
    "  --succeeded-ttl DURATION  keep succeeded messages this long, 0 forever (1h)\n" \
    "  --log-level LEVEL         debug, info, warn or error (info)\n" \
    "  --auth-token-file PATH    require 'Authorization: Bearer <token>' on every route\n" \
    "                            but /healthz; the token is the file's first line\n"

void rd_config_defaults(rd_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->listen_host, sizeof cfg->listen_host, "127.0.0.1");
    cfg->listen_port = 8080;
    snprintf(cfg->redis_host, sizeof cfg->redis_host, "127.0.0.1");
    cfg->redis_port = 6379;
    cfg->redis_timeout_ms = 5000;
    snprintf(cfg->prefix, sizeof cfg->prefix, "retryd");
    cfg->tick_ms = 250;
    cfg->lease_ms = 30 * 1000;
    cfg->max_body_bytes = 1048576;
    cfg->idle_timeout_ms = 60 * 1000;
    cfg->max_connections = 4096;
    cfg->dead_ttl_ms = 30LL * 86400 * 1000;
    cfg->succeeded_ttl_ms = 3600LL * 1000;
    cfg->log_level = RD_LOG_INFO;
}

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
    const char *scheme = "redis://";
    if (strncmp(url, scheme, strlen(scheme)) != 0) return -1;
    const char *p = url + strlen(scheme);
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

static int parse_listen(rd_config_t *cfg, const char *v)
{
    const char *colon = strrchr(v, ':');
    long long port;
    if (colon == NULL || parse_int(colon + 1, 0, 65535, &port)) return -1;
    if (copy_bounded(cfg->listen_host, sizeof cfg->listen_host, v, (size_t)(colon - v)))
        return -1;
    cfg->listen_port = (int)port;
    return 0;
}

/* Applies one setting; returns 0, or -1 when the value is bad or the name unknown. */
static int apply(rd_config_t *cfg, const char *name, const char *v)
{
    long long n;
    if (strcmp(name, "listen") == 0) return parse_listen(cfg, v);
    if (strcmp(name, "redis") == 0) return rd_config_parse_redis_url(cfg, v);
    if (strcmp(name, "redis-cluster") == 0) {
        if (*v == '\0' || strchr(v, ':') == NULL) return -1;
        return copy_bounded(cfg->redis_cluster, sizeof cfg->redis_cluster, v, strlen(v));
    }
    if (strcmp(name, "prefix") == 0) {
        if (*v == '\0' || strpbrk(v, "{}") != NULL) return -1;
        return copy_bounded(cfg->prefix, sizeof cfg->prefix, v, strlen(v));
    }
    if (strcmp(name, "redis-timeout-ms") == 0) {
        if (parse_int(v, 100, 600000, &n)) return -1;
        cfg->redis_timeout_ms = (int)n;
        return 0;
    }
    if (strcmp(name, "tick-ms") == 0) {
        if (parse_int(v, 1, 60000, &n)) return -1;
        cfg->tick_ms = (int)n;
        return 0;
    }
    if (strcmp(name, "lease-seconds") == 0) {
        if (parse_int(v, 1, 43200, &n)) return -1;
        cfg->lease_ms = n * 1000;
        return 0;
    }
    if (strcmp(name, "max-body") == 0) {
        if (parse_int(v, 1024, 1LL << 30, &n)) return -1;
        cfg->max_body_bytes = (size_t)n;
        return 0;
    }
    if (strcmp(name, "idle-timeout") == 0) {
        long long ms = rd_parse_duration_ms(v);
        if (ms < 1000) return -1;
        cfg->idle_timeout_ms = ms;
        return 0;
    }
    if (strcmp(name, "max-connections") == 0) {
        if (parse_int(v, 1, 1000000, &n)) return -1;
        cfg->max_connections = (int)n;
        return 0;
    }
    if (strcmp(name, "dead-ttl") == 0 || strcmp(name, "succeeded-ttl") == 0) {
        long long ms = rd_parse_duration_ms(v);
        if (ms < 0) return -1;
        if (name[0] == 'd') cfg->dead_ttl_ms = ms;
        else cfg->succeeded_ttl_ms = ms;
        return 0;
    }
    if (strcmp(name, "log-level") == 0) return rd_log_parse_level(v, &cfg->log_level);
    if (strcmp(name, "auth-token-file") == 0)
        return copy_bounded(cfg->auth_token_file, sizeof cfg->auth_token_file, v, strlen(v));
    return -1;
}

static const char *const names[] = { "listen", "redis", "redis-cluster", "redis-timeout-ms", "prefix",
                                     "tick-ms", "lease-seconds", "max-body", "dead-ttl",
                                     "succeeded-ttl", "log-level", "auth-token-file",
                                     "idle-timeout", "max-connections" };

/* A bad value as the error shows it: URLs (which may hold a password) masked. */
enum { SHOWN_MAX = 512 };

static void show_value(const char *name, const char *v, char *out, size_t cap)
{
    if (strcmp(name, "redis") == 0 || strcmp(name, "redis-cluster") == 0)
        rd_config_mask_url(v, out, cap);
    else
        snprintf(out, cap, "%s", v);
}

int rd_config_load(rd_config_t *cfg, int argc, char **argv, char *err, size_t err_len)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char env[64] = "RETRYD_";
        size_t j = strlen(env);
        for (const char *c = names[i]; *c && j < sizeof env - 1; c++)
            env[j++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
        env[j] = '\0';
        const char *v = getenv(env);
        if (v && apply(cfg, names[i], v) != 0) {
            char shown[SHOWN_MAX];
            show_value(names[i], v, shown, sizeof shown);
            snprintf(err, err_len, "bad value for %s: '%s'", env, shown);
            return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            snprintf(err, err_len, "%s", USAGE);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, err_len, "unexpected argument '%s'\n%s", arg, USAGE);
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
        if (apply(cfg, name, value) != 0) {
            char shown[SHOWN_MAX];
            show_value(name, value, shown, sizeof shown);
            snprintf(err, err_len, "bad option --%s '%s'\n%s", name, shown, USAGE);
            return -1;
        }
        continue;
bad:
        snprintf(err, err_len, "bad option '%s'", arg);
        return -1;
    }
    return 0;
}
