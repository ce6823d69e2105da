/* config.h - the daemon's settings: flags, RETRYD_* environment, defaults. */
#ifndef RETRYD_CONFIG_H
#define RETRYD_CONFIG_H

#include <stddef.h>

#include "retryd/log.h"

typedef struct rd_config {
    char listen_host[64];       /* --listen host:port (default 127.0.0.1:8080) */
    int listen_port;
    char redis_host[256];       /* --redis redis://[[user]:password@]host:port[/db] */
    int redis_port;
    char redis_user[128];       /* "" when none */
    char redis_password[256];   /* "" when none */
    int redis_db;
    int redis_tls;              /* --redis was rediss:// */
    char redis_cluster[1024];   /* --redis-cluster host:port,...: "" for one Redis */
    int redis_cluster_tls;      /* --redis-cluster was given as rediss://host:port,... */
    char redis_tls_ca[512];     /* --redis-tls-ca: "" uses the system store */
    char redis_tls_cert[512];   /* --redis-tls-cert, --redis-tls-key: mutual TLS */
    char redis_tls_key[512];
    char redis_tls_server_name[256]; /* --redis-tls-server-name: "" checks the host */
    int redis_tls_insecure;     /* --redis-tls-insecure yes: no check of the server */
    int redis_timeout_ms;       /* --redis-timeout-ms: a command older than this drops the link */
    char prefix[64];            /* --prefix: first part of every key */
    int tick_ms;                /* --tick-ms: longest the promoter sleeps */
    long long lease_ms;         /* --lease-seconds: default lease of a claim */
    size_t max_body_bytes;      /* --max-body */
    long long idle_timeout_ms;  /* --idle-timeout: no complete request for this long closes */
    int max_connections;        /* --max-connections */
    size_t max_pending_body_bytes;   /* --max-pending-body-bytes: bodies being read, in all */
    size_t max_pending_output_bytes; /* --max-pending-output-bytes: answers not yet sent, in all */
    long long dead_ttl_ms;      /* --dead-ttl: 0 keeps dead letters forever */
    long long succeeded_ttl_ms; /* --succeeded-ttl: 0 keeps succeeded forever */
    int series;                 /* --series on|off: sample the per-queue time series */
    int allow_shards;           /* --allow-shards yes (not in --help): a policy may set
                                   shards above 1 (docs/sharding.md) */
    rd_log_level_t log_level;   /* --log-level debug|info|warn|error */
    char auth_token_file[512];  /* --auth-token-file: "" leaves the API open */
    char token_file[512];       /* --token-file: scoped tokens, reread on SIGHUP; "" none */
    char alert_url[2048];       /* --alert-url: "" sends no alerts */
    char sqs_listen_host[64];   /* --sqs-listen host:port: "" (the default) serves no SQS */
    int sqs_listen_port;
    char sqs_account[16];       /* --sqs-account: 12 digits in queue URLs and ARNs */
    char sqs_region[32];        /* --sqs-region: in ARNs */
    char sqs_credentials[512];  /* --sqs-credentials: "" checks no signature */
    long long alert_claim_ms;   /* --alert-claim-ms: claim back alerts pending this long */
    long long alert_timeout_ms; /* --alert-timeout-ms: one alert POST at most */
} rd_config_t;

void rd_config_defaults(rd_config_t *cfg);

/* Applies RETRYD_* variables, then argv flags (flags win). Returns 0; 1 when
 * --help was asked (usage is in err); -1 with a message in err on bad input. */
int rd_config_load(rd_config_t *cfg, int argc, char **argv, char *err, size_t err_len);

/* "30d", "1h", "15m", "10s", "90" (seconds) -> milliseconds; -1 when invalid. */
long long rd_parse_duration_ms(const char *s);

/* Writes url into out (cap bytes, always NUL-terminated, cut to fit) with its
 * credentials masked: "redis://user:pw@host" -> "redis://user:***@host",
 * "redis://:pw@host" -> "redis://:***@host". Use it wherever a URL given by
 * the operator is printed or logged: a password is never shown. */
void rd_config_mask_url(const char *url, char *out, size_t cap);

/* Parses a redis:// or rediss:// (TLS) URL into cfg's redis_* fields.
 * Returns 0 or -1. */
int rd_config_parse_redis_url(rd_config_t *cfg, const char *url);

#endif
