/* test_e2e_tokens.c - end-to-end tests of scoped tokens (docs/security.md
 * "Tokens"): build/retryd with --token-file and --auth-token-file against a
 * real redis-server. Every route of the table with each role's token (the
 * role x route matrix), queue patterns in routes, listings and /metrics,
 * the head check, GET /auth/whoami, SIGHUP rotation, a malformed file
 * refusing start-up, and the legacy token as admin.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_tokens"
#include "e2e_common.h"

#include "retryd/tokens.h"

/* The group daemon's tokens: one per role, a pattern-limited pair and the
 * --auth-token-file one. */
static const struct {
    const char *token;
    unsigned roles;
} role_tokens[] = {
    { "tok-producer-5b1e", RD_ROLE_PRODUCER }, { "tok-worker-77aa", RD_ROLE_WORKER },
    { "tok-reader-19c0", RD_ROLE_READER },     { "tok-operator-e3d2", RD_ROLE_OPERATOR },
    { "tok-admin-0f4c", RD_ROLE_ADMIN },       { "tok-legacy-a8b9", RD_ROLE_ADMIN },
};
enum { N_ROLE_TOKENS = sizeof role_tokens / sizeof role_tokens[0] };
static const char ORDERS_TOKEN[] = "tok-orders-2c6d";     /* producer,reader orders-* */
static const char ORDERS_OP_TOKEN[] = "tok-orders-op-91fe"; /* operator orders-* ship-? */

static char g_token_file[128], g_legacy_file[128];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int tokens_setup(void **state)
{
    rd_alloc_init();
    if (e2e_suite_env(E2E_SUITE, 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    g_conn.fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "e2e%ld", (long)getpid());
    snprintf(g_token_file, sizeof g_token_file, "/tmp/retryd-e2e-tokens-%ld", (long)getpid());
    snprintf(g_legacy_file, sizeof g_legacy_file, "/tmp/retryd-e2e-legacy-%ld", (long)getpid());
    char text[2048];
    int n = snprintf(text, sizeof text, "# one token per role\n\n");
    for (size_t i = 0; i + 1 < N_ROLE_TOKENS; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%s %s\n", role_tokens[i].token,
                      rd_role_name(role_tokens[i].roles));
    snprintf(text + n, sizeof text - (size_t)n,
             "   # indented comment\n%s producer,reader orders-*\n%s\toperator  orders-* ship-?\n",
             ORDERS_TOKEN, ORDERS_OP_TOKEN);
    FILE *f = fopen(g_token_file, "w");
    if (f == NULL) return -1;
    fputs(text, f);
    fclose(f);
    f = fopen(g_legacy_file, "w");
    if (f == NULL) return -1;
    fprintf(f, "%s\n", role_tokens[N_ROLE_TOKENS - 1].token);
    fclose(f);
    (void)state;
    /* /readyz needs a token here: wait for /healthz only, then for ready
     * with one (wait_ready below). */
    return start_daemon(&g_daemon, g_redis_port, g_prefix, false, "--token-file", g_token_file,
                        "--auth-token-file", g_legacy_file, NULL);
}

static int tokens_teardown(void **state)
{
    unlink(g_token_file);
    unlink(g_legacy_file);
    return group_teardown(state);
}

/* One request with "Authorization: Bearer <token>" (none when NULL). */
static void http_as(int port, e2e_response_t *r, const char *token, const char *method,
                    const char *path, const char *body)
{
    char auth[256] = "";
    if (token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
    e2e_http_on(&g_conn, port, r, method, path, token ? auth : NULL, body,
                body ? strlen(body) : 0);
}

static void as(e2e_response_t *r, const char *token, const char *method, const char *path,
               const char *body)
{
    http_as(g_daemon.port, r, token, method, path, body);
}

/* Polls /readyz with token until 200 (the daemon's first link to Redis). */
static void wait_ready(int port, const char *token)
{
    e2e_response_t r = { 0 };
    long long deadline = e2e_mono_ms() + READY_TIMEOUT_MS;
    for (;;) {
        http_as(port, &r, token, "GET", "/readyz", NULL);
        if (r.status == 200) break;
        if (e2e_mono_ms() > deadline) fail_msg("/readyz with a token: %d", r.status);
        e2e_pause_ms(20);
    }
    e2e_response_free(&r);
}

static const char *admin_token(void)
{
    return role_tokens[4].token;
}

/* A 403 forbidden problem whose detail names role. */
static void expect_forbidden(const e2e_response_t *r, const char *instance, unsigned role)
{
    rd_json_t *p = e2e_expect_problem_type(r, 403, "forbidden");
    const char *detail = e2e_jstr(p, "detail");
    char named[64];
    snprintf(named, sizeof named, "the %s role", rd_role_name(role));
    if (strstr(detail, named) == NULL)
        fail_msg("%s: the 403 detail does not name %s: %s", instance, named, detail);
    assert_string_equal(e2e_jstr(p, "instance"), instance);
}

static const char *method_name(rd_http_method_t m)
{
    switch (m) {
    case RD_HTTP_GET: return "GET";
    case RD_HTTP_POST: return "POST";
    case RD_HTTP_PUT: return "PUT";
    case RD_HTTP_PATCH: return "PATCH";
    case RD_HTTP_DELETE: return "DELETE";
    default: return "OTHER";
    }
}

/* The path of a route with {q} = queue and {id} = 1. */
static void route_path(const rd_route_t *rt, const char *queue, char *path, size_t cap)
{
    size_t n = 0;
    for (const char *p = rt->pattern; *p && n + 2 < cap; p++) {
        if (*p == '{') {
            bool q = p[1] == 'q';
            p = strchr(p, '}');
            n += (size_t)snprintf(path + n, cap - n, "%s", q ? queue : "1");
        } else {
            path[n++] = *p;
        }
    }
    path[n] = '\0';
}

/* Every route of the table with each role's token: a token whose roles
 * grant the route's is never refused (not 401, not 403); any other gets 403
 * forbidden naming the role the route needs. Bodies go with the writes, so
 * a refused POST/PUT/PATCH is the head check's answer (its body unread). A
 * wrong token is 401 everywhere but the public rows. */
static void test_role_route_matrix(void **state)
{
    (void)state;
    wait_ready(g_daemon.port, admin_token());
    e2e_response_t r = { 0 };
    size_t checked = 0;
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        if (rt->flags & RD_ROUTE_PUBLIC) continue;
        char path[256];
        route_path(rt, "mx-q", path, sizeof path);
        const char *method = method_name(rt->method);
        const char *body = rt->method == RD_HTTP_GET || rt->method == RD_HTTP_DELETE ? NULL
                                                                                       : "{}";
        for (size_t t = 0; t < N_ROLE_TOKENS; t++) {
            as(&r, role_tokens[t].token, method, path, body);
            bool granted = rd_roles_grant(role_tokens[t].roles, rt->role);
            if (granted && (r.status == 401 || r.status == 403))
                fail_msg("%s %s as %s: %d, want it allowed: %s", method, path,
                         rd_role_name(role_tokens[t].roles), r.status, r.body);
            if (!granted) {
                if (r.status != 403)
                    fail_msg("%s %s as %s: %d, want 403", method, path,
                             rd_role_name(role_tokens[t].roles), r.status);
                expect_forbidden(&r, path, rt->role);
            }
            checked++;
        }
        as(&r, "tok-nobody", method, path, body);
        if (r.status != 401) fail_msg("%s %s with an unknown token: %d, want 401", method, path,
                                      r.status);
    }
    /* Spot checks of the table itself (docs/security.md "Tokens"). */
    as(&r, role_tokens[0].token, "POST", "/queues/mx-q/messages/1/replay", "{}");
    expect_forbidden(&r, "/queues/mx-q/messages/1/replay", RD_ROLE_OPERATOR);
    as(&r, role_tokens[2].token, "POST", "/queues/mx-q/claim", "{}");
    expect_forbidden(&r, "/queues/mx-q/claim", RD_ROLE_WORKER);
    as(&r, role_tokens[1].token, "GET", "/queues/mx-q/stats", NULL);
    expect_forbidden(&r, "/queues/mx-q/stats", RD_ROLE_READER);
    /* operator includes reader */
    as(&r, role_tokens[3].token, "GET", "/queues/mx-q/stats", NULL);
    e2e_expect_json(&r, 200);
    assert_true(checked >= 20 * N_ROLE_TOKENS);
    e2e_response_free(&r);
}

/* docs/openapi.json names each operation's role (x-retryd-role) as the
 * route table has it, and gives every non-public one a 403. */
static void test_openapi_names_each_role(void **state)
{
    (void)state;
    FILE *f = fopen("docs/openapi.json", "rb");
    if (f == NULL) fail_msg("cannot read docs/openapi.json (run from the source tree)");
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    rd_json_t *doc = rd_json_parse(text, n, NULL);
    assert_non_null(doc);
    const rd_json_t *paths = e2e_jget(doc, "paths");
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        if (rt->flags & RD_ROUTE_PUBLIC) continue;
        char key[16];
        snprintf(key, sizeof key, "%s", method_name(rt->method));
        for (char *k = key; *k; k++) *k = (char)(*k - 'A' + 'a');
        const rd_json_t *op = rd_json_get(rd_json_get(paths, rt->pattern), key);
        if (op == NULL) fail_msg("%s %s is not in docs/openapi.json", key, rt->pattern);
        const rd_json_t *role = rd_json_get(op, "x-retryd-role");
        if (role == NULL || strcmp(rd_json_string(role), rd_role_name(rt->role)) != 0)
            fail_msg("%s %s: x-retryd-role is not %s", key, rt->pattern, rd_role_name(rt->role));
        if (rd_json_get(e2e_jget(op, "responses"), "403") == NULL)
            fail_msg("%s %s has no 403 in docs/openapi.json", key, rt->pattern);
    }
    rd_json_free(doc);
}

/* A refused request with a body is answered at its head: a Content-Length
 * of 1 MB that is never sent still gets its 403 at once. */
static void test_head_check_refuses_before_body(void **state)
{
    (void)state;
    int fd = e2e_connect(g_daemon.port);
    assert_true(fd >= 0);
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /queues/hd-q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: 1000000\r\n\r\n{\"payload\":", role_tokens[2].token);
    assert_int_equal(e2e_send_all(fd, req, (size_t)n), 0);
    char got[2048];
    ssize_t len = recv(fd, got, sizeof got - 1, 0);
    close(fd);
    assert_true(len > 0);
    got[len] = '\0';
    if (strncmp(got, "HTTP/1.1 403 ", 13) != 0) fail_msg("want a 403 at the head: %s", got);
    assert_non_null(strstr(got, "/problems/forbidden"));
    assert_non_null(strstr(got, "the producer role"));
}

/* A token limited to orders-*: its queues work, others are 403 naming the
 * role; GET /queues and /metrics show only its queues and no registry
 * totals; a redrive or a dead_letter_queue into a queue outside its
 * patterns is refused too. */
static void test_patterns_limit_routes_and_listings(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    as(&r, admin_token(), "POST", "/queues/zz-other/messages", "{\"payload\":\"x\"}");
    e2e_expect_json(&r, 201);
    as(&r, ORDERS_TOKEN, "POST", "/queues/orders-eu/messages", "{\"payload\":\"o\"}");
    e2e_expect_json(&r, 201);
    as(&r, ORDERS_TOKEN, "POST", "/queues/zz-other/messages", "{\"payload\":\"o\"}");
    expect_forbidden(&r, "/queues/zz-other/messages", RD_ROLE_PRODUCER);
    as(&r, ORDERS_TOKEN, "GET", "/queues/zz-other/messages/1", NULL);
    expect_forbidden(&r, "/queues/zz-other/messages/1", RD_ROLE_READER);
    as(&r, ORDERS_TOKEN, "GET", "/queues/orders-eu/stats", NULL);
    e2e_expect_json(&r, 200);
    /* the pattern is the whole name: "xorders-eu" is not covered */
    as(&r, ORDERS_TOKEN, "GET", "/queues/xorders-eu/stats", NULL);
    expect_forbidden(&r, "/queues/xorders-eu/stats", RD_ROLE_READER);

    /* GET /queues: only orders-*, and no total (it would count the rest). */
    as(&r, ORDERS_TOKEN, "GET", "/queues?limit=1000", NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);
    const rd_json_t *list = e2e_jget(page, "queues");
    size_t shown = rd_json_array_size(list);
    assert_true(shown >= 1);
    for (size_t i = 0; i < shown; i++) {
        const char *name = e2e_jstr(rd_json_array_at(list, i), "name");
        if (strncmp(name, "orders-", 7) != 0) fail_msg("GET /queues shows %s to orders-*", name);
    }
    e2e_jnull(page, "total");
    as(&r, admin_token(), "GET", "/queues?limit=1000", NULL);
    page = e2e_expect_json(&r, 200);
    assert_true(e2e_jint(page, "total") >= 2);
    bool other_listed = false;
    list = e2e_jget(page, "queues");
    for (size_t i = 0; i < rd_json_array_size(list); i++)
        other_listed |= strcmp(e2e_jstr(rd_json_array_at(list, i), "name"), "zz-other") == 0;
    assert_true(other_listed);

    /* /metrics: the same filter (the snapshot may be up to 5 s old: poll
     * until it has orders-eu). */
    long long deadline = e2e_mono_ms() + 10000;
    for (;;) {
        as(&r, ORDERS_TOKEN, "GET", "/metrics", NULL);
        assert_int_equal(r.status, 200);
        if (strstr(r.body, "queue=\"orders-eu\"")) break;
        if (e2e_mono_ms() > deadline) fail_msg("/metrics never showed orders-eu: %s", r.body);
        e2e_pause_ms(100);
    }
    assert_null(strstr(r.body, "queue=\"zz-other\""));
    assert_null(strstr(r.body, "retryd_registered_queues"));
    assert_null(strstr(r.body, "retryd_http_"));
    for (;;) {
        as(&r, admin_token(), "GET", "/metrics", NULL);
        if (strstr(r.body, "queue=\"zz-other\"")) break;
        if (e2e_mono_ms() > deadline) fail_msg("/metrics never showed zz-other to admin");
        e2e_pause_ms(100);
    }
    assert_non_null(strstr(r.body, "retryd_registered_queues"));

    /* Writes that reach another queue: redrive "to", dead_letter_queue. */
    as(&r, ORDERS_OP_TOKEN, "POST", "/queues/orders-eu/replay",
       "{\"all\":true,\"to\":\"zz-other\"}");
    rd_json_t *p = e2e_expect_problem_type(&r, 403, "forbidden");
    assert_non_null(strstr(e2e_jstr(p, "detail"), "the queue in to"));
    as(&r, ORDERS_OP_TOKEN, "POST", "/queues/orders-eu/replay",
       "{\"all\":true,\"to\":\"ship-1\"}");
    assert_int_equal(r.status, 200);
    as(&r, ORDERS_OP_TOKEN, "PATCH", "/queues/orders-eu/policy",
       "{\"dead_letter_queue\":\"zz-other\"}");
    p = e2e_expect_problem_type(&r, 403, "forbidden");
    assert_non_null(strstr(e2e_jstr(p, "detail"), "dead_letter_queue"));
    as(&r, ORDERS_OP_TOKEN, "PATCH", "/queues/orders-eu/policy",
       "{\"dead_letter_queue\":\"orders-dlq\"}");
    e2e_expect_json(&r, 200);
    /* the second pattern ("ship-?") counts too */
    as(&r, ORDERS_OP_TOKEN, "GET", "/queues/ship-2/policy", NULL);
    e2e_expect_json(&r, 200);
    as(&r, ORDERS_OP_TOKEN, "GET", "/queues/ship-22/policy", NULL);
    expect_forbidden(&r, "/queues/ship-22/policy", RD_ROLE_READER);
    e2e_response_free(&r);
}

/* GET /auth/whoami: the token's roles and patterns, never the token. */
static void test_whoami(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    as(&r, ORDERS_TOKEN, "GET", "/auth/whoami", NULL);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_true(rd_json_bool(e2e_jget(doc, "auth")));
    const rd_json_t *roles = e2e_jget(doc, "roles");
    assert_int_equal(rd_json_array_size(roles), 2);
    assert_string_equal(rd_json_string(rd_json_array_at(roles, 0)), "producer");
    assert_string_equal(rd_json_string(rd_json_array_at(roles, 1)), "reader");
    const rd_json_t *patterns = e2e_jget(doc, "queue_patterns");
    assert_int_equal(rd_json_array_size(patterns), 1);
    assert_string_equal(rd_json_string(rd_json_array_at(patterns, 0)), "orders-*");
    assert_null(strstr(r.body, ORDERS_TOKEN));
    /* the legacy token of --auth-token-file is admin on every queue */
    as(&r, role_tokens[N_ROLE_TOKENS - 1].token, "GET", "/auth/whoami", NULL);
    doc = e2e_expect_json(&r, 200);
    roles = e2e_jget(doc, "roles");
    assert_int_equal(rd_json_array_size(roles), 1);
    assert_string_equal(rd_json_string(rd_json_array_at(roles, 0)), "admin");
    assert_int_equal(rd_json_array_size(e2e_jget(doc, "queue_patterns")), 0);
    as(&r, NULL, "GET", "/auth/whoami", NULL);
    e2e_expect_problem(&r, 401, "unauthorized", "/auth/whoami");
    e2e_response_free(&r);
}

/* Reads a whole (small) file into out; "" when it cannot. */
static void read_log(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Polls the log until it holds needle. */
static void wait_log(const char *path, const char *needle, char *log, size_t cap)
{
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        read_log(path, log, cap);
        if (strstr(log, needle)) return;
        if (e2e_mono_ms() > deadline) fail_msg("the log never said \"%s\": %s", needle, log);
        e2e_pause_ms(20);
    }
}

static size_t count_of(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

/* SIGHUP rereads the file: a new token works and a removed one gets 401; a
 * file with a bad line keeps the set and logs the line number (never a
 * token); the legacy token stays admin throughout. */
static void test_sighup_rotation(void **state)
{
    (void)state;
    char file[128], log_path[128], legacy[128], prefix[80];
    snprintf(file, sizeof file, "/tmp/retryd-e2e-rot-%ld", (long)getpid());
    snprintf(legacy, sizeof legacy, "/tmp/retryd-e2e-rot-legacy-%ld", (long)getpid());
    snprintf(log_path, sizeof log_path, "/tmp/retryd-e2e-rot-log-%ld", (long)getpid());
    snprintf(prefix, sizeof prefix, "%s-rot", g_prefix);
    unlink(log_path);
    write_file(file, "rot-old-token-1 reader\n");
    write_file(legacy, "rot-legacy-token\n");
    e2e_flags_t f;
    const char *const *argv = e2e_flags(&f, "--redis", e2e_redis_url(g_redis_port), prefix,
                                        TICK_MS, "info", "--token-file", file,
                                        "--auth-token-file", legacy, NULL);
    assert_int_equal(e2e_daemon_spawn_logged(&g_side, NULL, g_bin, argv, log_path), 0);
    assert_int_equal(e2e_daemon_wait_up(&g_side, true, false, READY_TIMEOUT_MS), 0);
    wait_ready(g_side.port, "rot-old-token-1");

    e2e_response_t r = { 0 };
    http_as(g_side.port, &r, "rot-new-token-2", "GET", "/queues", NULL);
    assert_int_equal(r.status, 401);

    write_file(file, "# rotated\nrot-new-token-2 reader,producer\n");
    kill(g_side.pid, SIGHUP);
    char log[16384];
    wait_log(log_path, "SIGHUP: 1 token(s) in", log, sizeof log);
    http_as(g_side.port, &r, "rot-new-token-2", "GET", "/queues", NULL);
    e2e_expect_json(&r, 200);
    http_as(g_side.port, &r, "rot-old-token-1", "GET", "/queues", NULL);
    assert_int_equal(r.status, 401);
    http_as(g_side.port, &r, "rot-legacy-token", "DELETE", "/queues/rot-q", NULL);
    assert_int_equal(r.status, 204);

    /* A bad line: the set stays, the log names line 3 and no token. */
    write_file(file, "rot-third-token-3 admin\n\nrot-fourth-token-4 superuser\n");
    kill(g_side.pid, SIGHUP);
    wait_log(log_path, "kept the previous tokens", log, sizeof log);
    assert_non_null(strstr(log, "line 3"));
    http_as(g_side.port, &r, "rot-new-token-2", "GET", "/queues", NULL);
    e2e_expect_json(&r, 200);
    http_as(g_side.port, &r, "rot-third-token-3", "GET", "/queues", NULL);
    assert_int_equal(r.status, 401);
    assert_int_equal(count_of(log, "SIGHUP: 1 token(s) in"), 1);

    /* and a good file again is taken */
    write_file(file, "rot-third-token-3 admin\n");
    kill(g_side.pid, SIGHUP);
    long long deadline = e2e_mono_ms() + 5000;
    while (count_of(log, "SIGHUP: 1 token(s) in") < 2) {
        if (e2e_mono_ms() > deadline) fail_msg("the second good SIGHUP was not logged: %s", log);
        e2e_pause_ms(20);
        read_log(log_path, log, sizeof log);
    }
    http_as(g_side.port, &r, "rot-third-token-3", "GET", "/queues", NULL);
    e2e_expect_json(&r, 200);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    read_log(log_path, log, sizeof log);
    static const char *const secrets[] = { "rot-old-token-1", "rot-new-token-2",
                                           "rot-third-token-3", "rot-fourth-token-4",
                                           "rot-legacy-token" };
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strstr(log, secrets[i])) fail_msg("the log shows a token: %s", log);
    unlink(file);
    unlink(legacy);
    unlink(log_path);
    e2e_response_free(&r);
}

/* A malformed token file refuses start-up: exit 2, stderr naming the line,
 * never the token. */
static void expect_refused(const char *text, const char *line_named, const char *secret)
{
    char file[128], log_path[128];
    snprintf(file, sizeof file, "/tmp/retryd-e2e-bad-%ld", (long)getpid());
    snprintf(log_path, sizeof log_path, "/tmp/retryd-e2e-bad-log-%ld", (long)getpid());
    unlink(log_path);
    write_file(file, text);
    e2e_flags_t f;
    const char *const *argv = e2e_flags(&f, "--redis", e2e_redis_url(g_redis_port), g_prefix,
                                        TICK_MS, "warn", "--token-file", file, NULL);
    assert_int_equal(e2e_daemon_spawn_logged(&g_side, NULL, g_bin, argv, log_path), 0);
    int status = e2e_daemon_stop(&g_side, 0, E2E_STOP_TIMEOUT_MS);
    char log[4096];
    read_log(log_path, log, sizeof log);
    if (status != 2) fail_msg("retryd with a bad token file: exit %d, want 2: %s", status, log);
    if (strstr(log, line_named) == NULL) fail_msg("the error does not name %s: %s", line_named,
                                                  log);
    if (secret && strstr(log, secret)) fail_msg("the error shows the token: %s", log);
    unlink(file);
    unlink(log_path);
}

static void test_malformed_file_refuses_start(void **state)
{
    (void)state;
    expect_refused("good-token-aaaa reader\n# fine\nbad-token-bbbb reader,wizard\n", "line 3",
                   "bad-token-bbbb");
    expect_refused("just-a-token-cccc\n", "line 1", "just-a-token-cccc");
    /* roles and token swapped: the token is in the roles field */
    expect_refused("\n\nreader swapped-token-dddd\n", "line 3", "swapped-token-dddd");
    expect_refused("same-token-eeee reader\nsame-token-eeee admin\n", "line 2",
                   "same-token-eeee");
    expect_refused("# only comments\n\n", "holds no token", NULL);
    expect_refused("ok-token-ffff reader,\n", "line 1", "ok-token-ffff");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_role_route_matrix, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_openapi_names_each_role, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_head_check_refuses_before_body, test_setup,
                                        test_teardown),
        cmocka_unit_test_setup_teardown(test_patterns_limit_routes_and_listings, test_setup,
                                        test_teardown),
        cmocka_unit_test_setup_teardown(test_whoami, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_sighup_rotation, test_setup, test_teardown),
        cmocka_unit_test_setup_teardown(test_malformed_file_refuses_start, test_setup,
                                        test_teardown),
    };
    int failed = cmocka_run_group_tests_name("e2e_tokens", tests, tokens_setup, tokens_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
