/* test_config.c - unit tests for config.c: defaults, durations, redis:// URLs,
 * flags and RETRYD_* environment variables (docs/reference.md "Daemon"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/config.h"

/* Every variable rd_config_load reads; unset around each test so the caller's
 * environment cannot leak in and a failing test cannot leak out. */
static const char *const env_names[] = {
    "RETRYD_LISTEN", "RETRYD_REDIS", "RETRYD_REDIS_TIMEOUT_MS", "RETRYD_PREFIX",
    "RETRYD_TICK_MS", "RETRYD_LEASE_SECONDS", "RETRYD_MAX_BODY", "RETRYD_DEAD_TTL",
    "RETRYD_SUCCEEDED_TTL", "RETRYD_LOG_LEVEL", "RETRYD_ALERT_URL", "RETRYD_ALERT_CLAIM_MS",
    "RETRYD_ALERT_TIMEOUT_MS",
};

static int clear_env(void **state)
{
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++) unsetenv(env_names[i]);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

#define MAX_ARGS 32

/* Defaults, then rd_config_load with argv = { "retryd", args..., NULL }. */
static int load(rd_config_t *cfg, char *err, size_t err_len, const char *const *args)
{
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)"retryd";
    for (size_t i = 0; args && args[i]; i++) {
        assert_true(argc <= MAX_ARGS);
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    rd_config_defaults(cfg);
    err[0] = '\0';
    return rd_config_load(cfg, argc, argv, err, err_len);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void assert_load_ok(rd_config_t *cfg, const char *const *args)
{
    char err[2048];
    int rc = load(cfg, err, sizeof err, args);
    if (rc != 0) fail_msg("rd_config_load = %d: %s", rc, err);
}

/* Bad input: -1 and a message that names what was wrong. */
static void assert_load_bad(const char *const *args, const char *err_mentions)
{
    rd_config_t cfg;
    char err[2048];
    int rc = load(&cfg, err, sizeof err, args);
    if (rc != -1)
        fail_msg("%s ...: rd_config_load = %d, want -1", args ? args[0] : "(env)", rc);
    assert_true(strlen(err) > 0);
    if (err_mentions && strstr(err, err_mentions) == NULL)
        fail_msg("error \"%s\" does not mention \"%s\"", err, err_mentions);
}

/* ---------------------------------------------------------------------------
 * Defaults
 * ------------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    rd_config_t cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    rd_config_defaults(&cfg);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 8080);
    assert_string_equal(cfg.redis_host, "127.0.0.1");
    assert_int_equal(cfg.redis_port, 6379);
    assert_string_equal(cfg.redis_user, "");
    assert_string_equal(cfg.redis_password, "");
    assert_int_equal(cfg.redis_db, 0);
    assert_string_equal(cfg.prefix, "retryd");
    assert_int_equal(cfg.tick_ms, 250);
    assert_int_equal(cfg.lease_ms, 30000);
    assert_int_equal(cfg.max_body_bytes, 1048576);
    assert_int_equal(cfg.dead_ttl_ms, 30LL * 86400 * 1000);
    assert_int_equal(cfg.dead_ttl_ms, 2592000000LL);
    assert_int_equal(cfg.succeeded_ttl_ms, 3600000);
    assert_int_equal(cfg.log_level, RD_LOG_INFO);
    assert_true(cfg.redis_timeout_ms > 0);
}

static void test_load_without_args_keeps_defaults(void **state)
{
    rd_config_t cfg;
    assert_load_ok(&cfg, NULL);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 8080);
    assert_string_equal(cfg.prefix, "retryd");
    assert_int_equal(cfg.tick_ms, 250);
    assert_int_equal(cfg.lease_ms, 30000);
}

/* ---------------------------------------------------------------------------
 * Durations
 * ------------------------------------------------------------------------- */

static void test_duration_valid(void **state)
{
    assert_int_equal(rd_parse_duration_ms("0"), 0);
    assert_int_equal(rd_parse_duration_ms("0d"), 0);
    assert_int_equal(rd_parse_duration_ms("90"), 90000);
    assert_int_equal(rd_parse_duration_ms("10s"), 10000);
    assert_int_equal(rd_parse_duration_ms("15m"), 900000);
    assert_int_equal(rd_parse_duration_ms("1h"), 3600000);
    assert_int_equal(rd_parse_duration_ms("30d"), 2592000000LL);
    assert_int_equal(rd_parse_duration_ms("365d"), 31536000000LL);
    assert_int_equal(rd_parse_duration_ms("007m"), 420000);
}

static void test_duration_invalid(void **state)
{
    const char *bad[] = { "", "x", "1w", "-1", "1.5h", "h", "s", " 1", "1 ", "1hh", "1hs", "+1",
                          "1H", "1D", "10ms", "0x10", "99999999999999999999",
                          "9223372036854775807d", "1e3" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long ms = rd_parse_duration_ms(bad[i]);
        if (ms != -1) fail_msg("\"%s\" -> %lld, want -1", bad[i], ms);
    }
    assert_int_equal(rd_parse_duration_ms(NULL), -1);
}

/* ---------------------------------------------------------------------------
 * redis:// URLs
 * ------------------------------------------------------------------------- */

static void test_redis_url_host_port_db(void **state)
{
    rd_config_t cfg;
    rd_config_defaults(&cfg);
    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://h:1234/2"), 0);
    assert_string_equal(cfg.redis_host, "h");
    assert_int_equal(cfg.redis_port, 1234);
    assert_int_equal(cfg.redis_db, 2);
    assert_string_equal(cfg.redis_user, "");
    assert_string_equal(cfg.redis_password, "");

    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://10.0.0.5"), 0);
    assert_string_equal(cfg.redis_host, "10.0.0.5");
    assert_int_equal(cfg.redis_port, 6379);
    assert_int_equal(cfg.redis_db, 0);

    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://cache.local:65535/"), 0);
    assert_string_equal(cfg.redis_host, "cache.local");
    assert_int_equal(cfg.redis_port, 65535);
    assert_int_equal(cfg.redis_db, 0);

    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://h:1/15"), 0);
    assert_int_equal(cfg.redis_port, 1);
    assert_int_equal(cfg.redis_db, 15);
}

static void test_redis_url_credentials(void **state)
{
    rd_config_t cfg;
    rd_config_defaults(&cfg);
    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://:pw@h:6379"), 0);
    assert_string_equal(cfg.redis_user, "");
    assert_string_equal(cfg.redis_password, "pw");
    assert_string_equal(cfg.redis_host, "h");
    assert_int_equal(cfg.redis_port, 6379);

    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://user:pw@h"), 0);
    assert_string_equal(cfg.redis_user, "user");
    assert_string_equal(cfg.redis_password, "pw");
    assert_string_equal(cfg.redis_host, "h");
    assert_int_equal(cfg.redis_port, 6379);

    /* The last '@' ends the credentials; the first ':' ends the user. */
    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://u:p@s:s@h:7000/3"), 0);
    assert_string_equal(cfg.redis_user, "u");
    assert_string_equal(cfg.redis_password, "p@s:s");
    assert_string_equal(cfg.redis_host, "h");
    assert_int_equal(cfg.redis_port, 7000);
    assert_int_equal(cfg.redis_db, 3);

    /* A later URL without credentials or db clears them. */
    assert_int_equal(rd_config_parse_redis_url(&cfg, "redis://other"), 0);
    assert_string_equal(cfg.redis_user, "");
    assert_string_equal(cfg.redis_password, "");
    assert_int_equal(cfg.redis_db, 0);
    assert_string_equal(cfg.redis_host, "other");
}

static void test_redis_url_invalid(void **state)
{
    const char *bad[] = {
        "", "h:6379", "http://h:6379", "redis:/h", "rediss:/h", "rediss://", "redis//h",
        "redis://", "redis://:6379", "redis://user:pw@", "redis://user:pw@:6379",
        "redis://h:0", "redis://h:70000", "redis://h:65536", "redis://h:-1", "redis://h:",
        "redis://h:abc", "redis://h:12x", "redis://h:99999999", "redis://h/abc",
        "redis://h/-1", "redis://h/1x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_config_t cfg;
        rd_config_defaults(&cfg);
        if (rd_config_parse_redis_url(&cfg, bad[i]) != -1)
            fail_msg("\"%s\" accepted (host \"%s\" port %d)", bad[i], cfg.redis_host,
                     cfg.redis_port);
    }
}

/* ---------------------------------------------------------------------------
 * Flags
 * ------------------------------------------------------------------------- */

static void test_flags_separate_values(void **state)
{
    rd_config_t cfg;
    assert_load_ok(&cfg, ARGS("--listen", "0.0.0.0:9000", "--redis", "redis://r:7000/1",
                              "--prefix", "app", "--tick-ms", "100", "--lease-seconds", "45",
                              "--max-body", "2048", "--dead-ttl", "7d", "--succeeded-ttl",
                              "0", "--log-level", "debug"));
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_int_equal(cfg.listen_port, 9000);
    assert_string_equal(cfg.redis_host, "r");
    assert_int_equal(cfg.redis_port, 7000);
    assert_int_equal(cfg.redis_db, 1);
    assert_string_equal(cfg.prefix, "app");
    assert_int_equal(cfg.tick_ms, 100);
    assert_int_equal(cfg.lease_ms, 45000);
    assert_int_equal(cfg.max_body_bytes, 2048);
    assert_int_equal(cfg.dead_ttl_ms, 7LL * 86400 * 1000);
    assert_int_equal(cfg.succeeded_ttl_ms, 0);
    assert_int_equal(cfg.log_level, RD_LOG_DEBUG);
}

static void test_flags_with_equals(void **state)
{
    rd_config_t cfg;
    assert_load_ok(&cfg, ARGS("--lease-seconds=60", "--listen=127.0.0.2:0", "--tick-ms=1",
                              "--dead-ttl=0", "--succeeded-ttl=15m", "--log-level=error",
                              "--redis=redis://:secret@db:6380"));
    assert_int_equal(cfg.lease_ms, 60000);
    assert_string_equal(cfg.listen_host, "127.0.0.2");
    assert_int_equal(cfg.listen_port, 0);
    assert_int_equal(cfg.tick_ms, 1);
    assert_int_equal(cfg.dead_ttl_ms, 0);
    assert_int_equal(cfg.succeeded_ttl_ms, 900000);
    assert_int_equal(cfg.log_level, RD_LOG_ERROR);
    assert_string_equal(cfg.redis_password, "secret");
    assert_string_equal(cfg.redis_host, "db");
    assert_int_equal(cfg.redis_port, 6380);
}

static void test_flags_bounds(void **state)
{
    rd_config_t cfg;
    assert_load_ok(&cfg, ARGS("--lease-seconds", "1"));
    assert_int_equal(cfg.lease_ms, 1000);
    assert_load_ok(&cfg, ARGS("--lease-seconds", "43200"));
    assert_int_equal(cfg.lease_ms, 43200000LL);
    assert_load_ok(&cfg, ARGS("--max-body", "1024"));
    assert_int_equal(cfg.max_body_bytes, 1024);
    /* --series on|off (on by default) samples the time series. */
    assert_load_ok(&cfg, ARGS("--tick-ms", "10"));
    assert_int_equal(cfg.series, 1);
    assert_load_ok(&cfg, ARGS("--series", "off"));
    assert_int_equal(cfg.series, 0);
    assert_load_ok(&cfg, ARGS("--series=on"));
    assert_int_equal(cfg.series, 1);
    assert_load_bad(ARGS("--series", "no"), "--series");
    /* The last occurrence wins. */
    assert_load_ok(&cfg, ARGS("--tick-ms", "10", "--tick-ms", "20"));
    assert_int_equal(cfg.tick_ms, 20);
    char prefix[64];
    memset(prefix, 'p', 63);
    prefix[63] = '\0';
    assert_load_ok(&cfg, ARGS("--prefix", prefix));
    assert_string_equal(cfg.prefix, prefix);
}

static void test_flags_bad_values(void **state)
{
    assert_load_bad(ARGS("--listen", "nohostport"), "listen");
    assert_load_bad(ARGS("--listen", "h:70000"), "listen");
    assert_load_bad(ARGS("--listen", "h:"), "listen");
    assert_load_bad(ARGS("--listen", "h:80x"), "listen");
    assert_load_bad(ARGS("--lease-seconds=0"), "lease-seconds");
    assert_load_bad(ARGS("--lease-seconds=43201"), "lease-seconds");
    assert_load_bad(ARGS("--lease-seconds", "abc"), "lease-seconds");
    assert_load_bad(ARGS("--lease-seconds", ""), "lease-seconds");
    assert_load_bad(ARGS("--tick-ms=0"), "tick-ms");
    assert_load_bad(ARGS("--max-body=10"), "max-body");
    assert_load_bad(ARGS("--dead-ttl=1w"), "dead-ttl");
    assert_load_bad(ARGS("--succeeded-ttl=-1"), "succeeded-ttl");
    assert_load_bad(ARGS("--log-level=loud"), "log-level");
    assert_load_bad(ARGS("--prefix="), "prefix");
    assert_load_bad(ARGS("--prefix", "a{b}"), "prefix");
    assert_load_bad(ARGS("--redis=http://x"), "redis");
    assert_load_bad(ARGS("--redis", "redis://h:0"), "redis");

    char prefix[65];
    memset(prefix, 'p', 64);
    prefix[64] = '\0';
    assert_load_bad(ARGS("--prefix", prefix), "prefix");
}

static void test_flags_usage_errors(void **state)
{
    assert_load_bad(ARGS("--lease-seconds"), "lease-seconds");
    assert_load_bad(ARGS("positional"), "positional");
    assert_load_bad(ARGS("-x"), "-x");
    assert_load_bad(ARGS("--nope=1"), "nope");
    assert_load_bad(ARGS("--nope", "1"), "nope");
    assert_load_bad(ARGS("--tick-ms", "100", "--nope", "1"), "nope");
}

static void test_help(void **state)
{
    rd_config_t cfg;
    char err[4096];
    assert_int_equal(load(&cfg, err, sizeof err, ARGS("--help")), 1);
    assert_int_equal(strncmp(err, "usage:", 6), 0);
    assert_non_null(strstr(err, "--lease-seconds"));
    assert_int_equal(load(&cfg, err, sizeof err, ARGS("-h")), 1);
    assert_int_equal(strncmp(err, "usage:", 6), 0);
    assert_int_equal(load(&cfg, err, sizeof err, ARGS("--tick-ms", "5", "--help")), 1);
}

/* Instances sharing a Redis with different --dead-ttl/--succeeded-ttl apply
 * one or the other, as whichever ticks a queue: --help and README say that
 * retention for the whole fleet belongs in the queue's policy. */
static void test_help_says_fleet_retention_is_policy(void **state)
{
    rd_config_t cfg;
    char err[16384];
    assert_int_equal(load(&cfg, err, sizeof err, ARGS("--help")), 1);
    static const char *const flags[][2] = { { "--dead-ttl", "dead_ttl" },
                                            { "--succeeded-ttl", "succeeded_ttl" } };
    FILE *f = fopen("README.md", "r");
    if (f == NULL) fail_msg("cannot read README.md (run from the source tree)");
    static char readme[1 << 17];
    size_t n = fread(readme, 1, sizeof readme - 1, f);
    fclose(f);
    readme[n] = '\0';
    for (int i = 0; i < 2; i++) {
        char *at = strstr(err, flags[i][0]);
        assert_non_null(at);
        char entry[512];
        const char *end = strstr(at + 2, "\n  --");
        snprintf(entry, sizeof entry, "%.*s", end ? (int)(end - at) : (int)strlen(at), at);
        if (strstr(entry, "policy") == NULL || strstr(entry, flags[i][1]) == NULL)
            fail_msg("--help for %s does not send fleet-wide retention to the policy's %s: %s",
                     flags[i][0], flags[i][1], entry);
        char row_start[64];
        snprintf(row_start, sizeof row_start, "| `%s` |", flags[i][0]);
        char *row = strstr(readme, row_start);
        assert_non_null(row);
        char line[1024];
        const char *eol = strchr(row, '\n');
        snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - row) : (int)strlen(row), row);
        if (strstr(line, "policy") == NULL || strstr(line, flags[i][1]) == NULL)
            fail_msg("README's %s row does not send fleet-wide retention to the policy: %s",
                     flags[i][0], line);
    }
}

/* ---------------------------------------------------------------------------
 * Environment
 * ------------------------------------------------------------------------- */

static void test_env_applied(void **state)
{
    setenv("RETRYD_PREFIX", "envprefix", 1);
    setenv("RETRYD_TICK_MS", "100", 1);
    setenv("RETRYD_LEASE_SECONDS", "45", 1);
    setenv("RETRYD_LISTEN", "0.0.0.0:7070", 1);
    setenv("RETRYD_DEAD_TTL", "2h", 1);
    rd_config_t cfg;
    assert_load_ok(&cfg, NULL);
    assert_string_equal(cfg.prefix, "envprefix");
    assert_int_equal(cfg.tick_ms, 100);
    assert_int_equal(cfg.lease_ms, 45000);
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_int_equal(cfg.listen_port, 7070);
    assert_int_equal(cfg.dead_ttl_ms, 7200000);
}

static void test_flags_override_env(void **state)
{
    setenv("RETRYD_PREFIX", "envprefix", 1);
    setenv("RETRYD_TICK_MS", "100", 1);
    rd_config_t cfg;
    assert_load_ok(&cfg, ARGS("--tick-ms", "50"));
    assert_int_equal(cfg.tick_ms, 50);
    assert_string_equal(cfg.prefix, "envprefix");
    assert_load_ok(&cfg, ARGS("--prefix=flagprefix"));
    assert_string_equal(cfg.prefix, "flagprefix");
    assert_int_equal(cfg.tick_ms, 100);
}

static void test_env_bad_value(void **state)
{
    setenv("RETRYD_TICK_MS", "abc", 1);
    assert_load_bad(NULL, "RETRYD_TICK_MS");
    clear_env(NULL);
    setenv("RETRYD_REDIS", "tcp://x", 1);
    assert_load_bad(NULL, "RETRYD_REDIS");
}


/* A bad --redis URL (or RETRYD_REDIS) is named in the error, but never its
 * password (docs/reference.md "Daemon"): the message goes to stderr and into logs. */
static void assert_bad_url_masked(const char *const *args, const char *secret,
                                  const char *want_masked)
{
    rd_config_t cfg;
    char err[4096];
    assert_int_equal(load(&cfg, err, sizeof err, args), -1);
    if (strstr(err, secret) != NULL) fail_msg("the password '%s' is in: %s", secret, err);
    if (strstr(err, want_masked) == NULL) fail_msg("'%s' is not in: %s", want_masked, err);
}

static void test_bad_redis_url_masks_password(void **state)
{
    assert_bad_url_masked(ARGS("--redis", "redis://:s3cretpw@db.example:0"), "s3cretpw",
                          "redis://:***@db.example:0");
    assert_bad_url_masked(ARGS("--redis=redis://alice:s3cretpw@db.example:99999"), "s3cretpw",
                          "redis://alice:***@db.example:99999");
    /* Without a colon the whole user part is the password (as parsed). */
    assert_bad_url_masked(ARGS("--redis", "redis://s3cretpw@host:x"), "s3cretpw",
                          "redis://***@host:x");
    /* A password holding '@' or ':' is masked whole (the last '@' ends it). */
    assert_bad_url_masked(ARGS("--redis", "redis://:s3c@ret:pw@host:/x"), "ret:pw",
                          "redis://:***@host:/x");
    assert_bad_url_masked(ARGS("--redis", "rediss://:s3cretpw@host:0"), "s3cretpw",
                          "rediss://:***@host:0");
    setenv("RETRYD_REDIS", "redis://:s3cretpw@host:port", 1);
    assert_bad_url_masked(NULL, "s3cretpw", "redis://:***@host:port");
    unsetenv("RETRYD_REDIS");
    /* A too-long password is refused without being shown either. */
    char url[600] = "redis://:";
    memset(url + strlen(url), 'k', 300);
    strcat(url, "@host:6379");
    assert_bad_url_masked(ARGS("--redis", url), "kkkkkkkk", "redis://:***@host:6379");
}

/* --alert-url takes an http(s) URL without spaces or control bytes; a bad
 * one is refused with its credentials masked; the claim threshold and the
 * POST timeout have bounds and defaults. */
static void test_alert_flags(void **state)
{
    rd_config_t cfg;
    assert_load_ok(&cfg, ARGS("--log-level", "info"));
    assert_string_equal(cfg.alert_url, "");
    assert_int_equal(cfg.alert_claim_ms, 30000);
    assert_int_equal(cfg.alert_timeout_ms, 5000);
    assert_load_ok(&cfg, ARGS("--alert-url", "https://hooks.example/retryd?x=1",
                              "--alert-claim-ms", "1000", "--alert-timeout-ms", "100"));
    assert_string_equal(cfg.alert_url, "https://hooks.example/retryd?x=1");
    assert_int_equal(cfg.alert_claim_ms, 1000);
    assert_int_equal(cfg.alert_timeout_ms, 100);
    assert_load_ok(&cfg, ARGS("--alert-url=http://127.0.0.1:9/h"));
    assert_string_equal(cfg.alert_url, "http://127.0.0.1:9/h");
    assert_load_bad(ARGS("--alert-url", "ftp://h/x"), "alert-url");
    assert_load_bad(ARGS("--alert-url", "hooks.example"), "alert-url");
    assert_load_bad(ARGS("--alert-url", "http://h/a b"), "alert-url");
    assert_load_bad(ARGS("--alert-url", "http://h/\n"), "alert-url");
    assert_load_bad(ARGS("--alert-claim-ms", "999"), "alert-claim-ms");
    assert_load_bad(ARGS("--alert-claim-ms", "3600001"), "alert-claim-ms");
    assert_load_bad(ARGS("--alert-timeout-ms", "99"), "alert-timeout-ms");
    assert_bad_url_masked(ARGS("--alert-url", "ftp://bob:s3cretpw@hooks.example"), "s3cretpw",
                          "ftp://bob:***@hooks.example");
}

static void test_mask_url(void **state)
{
    char out[256];
    rd_config_mask_url("redis://:pw@h:1/2", out, sizeof out);
    assert_string_equal(out, "redis://:***@h:1/2");
    rd_config_mask_url("redis://u:pw@h", out, sizeof out);
    assert_string_equal(out, "redis://u:***@h");
    rd_config_mask_url("redis://h:6379", out, sizeof out);
    assert_string_equal(out, "redis://h:6379");
    rd_config_mask_url("u:p@h", out, sizeof out);
    assert_string_equal(out, "u:***@h");
    rd_config_mask_url("", out, sizeof out);
    assert_string_equal(out, "");
    /* Cut to fit, never with the password. */
    char small[12];
    rd_config_mask_url("redis://:password@hostname:6379", small, sizeof small);
    assert_null(strstr(small, "pass"));
    assert_true(strlen(small) < sizeof small);
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_load_without_args_keeps_defaults, clear_env,
                                        clear_env),
        cmocka_unit_test(test_duration_valid),
        cmocka_unit_test_setup_teardown(test_alert_flags, clear_env, clear_env),
        cmocka_unit_test(test_duration_invalid),
        cmocka_unit_test(test_redis_url_host_port_db),
        cmocka_unit_test(test_redis_url_credentials),
        cmocka_unit_test(test_redis_url_invalid),
        cmocka_unit_test_setup_teardown(test_flags_separate_values, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_flags_with_equals, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_flags_bounds, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_flags_bad_values, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_flags_usage_errors, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_help, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_help_says_fleet_retention_is_policy, clear_env,
                                        clear_env),
        cmocka_unit_test_setup_teardown(test_env_applied, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_flags_override_env, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_bad_value, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_bad_redis_url_masks_password, clear_env, clear_env),
        cmocka_unit_test(test_mask_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
