/* test_e2e_routes.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: enqueue and its validation, reading and routing, listing,
 * strict input (control bytes, numbers, query values, odd names) and UTF-8 text.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_routes"
#include "e2e_common.h"

/* ------------------------------------------------------------------------ */
/* Enqueue and validation                                                   */
/* ------------------------------------------------------------------------ */

static void test_enqueue_returns_message_and_location(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "enq");
    e2e_response_t r = { 0 };

    long long before = e2e_wall_ms();
    http(&r, "POST", messages_path(q), "{\"payload\":\"hello\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/1", q));
    expect_message(m, 1, q, "pending", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "hello");
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "last_error");
    e2e_jnull(m, "lease_expires_at");
    long long created = e2e_jtime(m, "created_at");
    assert_int_equal(e2e_jtime(m, "updated_at"), created);
    /* Redis runs on this host, so its clock is ours (give or take 2 s). */
    assert_true(created >= before - 2000 && created <= e2e_wall_ms() + 2000);

    http(&r, "POST", messages_path(q), "{\"payload\":\"second\",\"max_retries\":5}");
    m = e2e_expect_json(&r, 201);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/2", q));
    expect_message(m, 2, q, "pending", 0, 5);

    /* null means "default". */
    http(&r, "POST", messages_path(q), "{\"payload\":\"third\",\"max_retries\":null}");
    expect_message(e2e_expect_json(&r, 201), 3, q, "pending", 0, 3);
    e2e_response_free(&r);
}

static void expect_payload_round_trip(const char *q, const char *payload)
{
    size_t len;
    char *body = e2e_json_with_string("payload", payload, &len);
    e2e_response_t r = { 0 };
    http_to(g_daemon.port, &r, "POST", messages_path(q), body, len);
    rd_free(body);
    rd_json_t *m = e2e_expect_json(&r, 201);
    long long id = e2e_jint(m, "id");
    const char *got = e2e_jstr(m, "payload");
    assert_int_equal(strlen(got), strlen(payload));
    assert_memory_equal(got, payload, strlen(payload));

    http(&r, "GET", message_path(q, id, NULL), NULL);
    got = e2e_jstr(e2e_expect_json(&r, 200), "payload");
    assert_int_equal(strlen(got), strlen(payload));
    assert_memory_equal(got, payload, strlen(payload));
    e2e_response_free(&r);
}

static void test_payload_is_returned_byte_for_byte(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "bytes");
    expect_payload_round_trip(q, "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC "
                                 "\xF0\x9F\x8E\x89");
    expect_payload_round_trip(q, "say \"hi\" \\ back\\slash / 'single' \\u0041");
    expect_payload_round_trip(q, "line1\nline2\r\n\ttab\x01\x1f end");
    expect_payload_round_trip(q, "{\"looks\":[\"like\",\"json\"]}");
    expect_payload_round_trip(q, "");

    enum { BIG = 100 * 1024 };
    static const char pattern[] = "0123456789abcdef\"\\\n\t{}[]:, \xC3\xA9";
    char *big = malloc(BIG + 1);
    for (size_t i = 0; i < BIG; i++) big[i] = pattern[i % (sizeof pattern - 1)];
    big[BIG] = '\0';
    expect_payload_round_trip(q, big);
    free(big);

    /* U+0000 may be refused, but is never cut short (docs/reference.md "Text"). */
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"a\\u0000b\"}");
    if (r.status == 201) assert_non_null(strstr(r.body, "\"payload\":\"a\\u0000b\""));
    else expect_field_error(expect_invalid(&r, NULL, 1), "payload", "invalid", NULL);
    e2e_response_free(&r);
}

static void test_enqueue_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "valid");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    const char *range = "max_retries must be between 1 and 10.";
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"max_retries\":3}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "required", NULL);

    http(&r, "POST", path, "{\"payload\":5}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid", NULL);
    http(&r, "POST", path, "{\"payload\":{\"a\":1}}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid", NULL);

    const char *bad_retries[] = { "0", "11", "\"3\"", "-1", "2.5", "true" };
    for (size_t i = 0; i < sizeof bad_retries / sizeof bad_retries[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"max_retries\":%s}", bad_retries[i]));
        expect_field_error(expect_invalid(&r, path, 1), "max_retries", "invalid", range);
    }

    const char *bad_delays[] = { "-1", "2592001", "1.5", "\"10\"" };
    for (size_t i = 0; i < sizeof bad_delays / sizeof bad_delays[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"delay_seconds\":%s}", bad_delays[i]));
        expect_field_error(expect_invalid(&r, path, 1), "delay_seconds", "invalid", NULL);
    }

    http(&r, "POST", path, "{\"payload\":7,\"max_retries\":0}");
    rd_json_t *errors = expect_invalid(&r, path, 2);
    expect_field_error(errors, "payload", "invalid", NULL);
    expect_field_error(errors, "max_retries", "invalid", range);

    /* Nothing above created a message: the first real one gets id 1. */
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\",\"max_retries\":10}"), 1);
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\",\"max_retries\":1}"), 2);
    e2e_response_free(&r);
}

/* priority and ttl_seconds (docs/reference.md "Priority", "Validation"):
 * shown on the 201, GET, the listing and the claim; claimed highest first;
 * 422 on the field outside its range, a string or a fraction. */
static void test_enqueue_priority_and_ttl(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "prio");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    e2e_response_t r = { 0 };

    static const char *const bad_priority[] = { "-1", "10", "\"3\"", "3.5" };
    for (size_t i = 0; i < sizeof bad_priority / sizeof bad_priority[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"priority\":%s}", bad_priority[i]));
        expect_field_error(expect_invalid(&r, path, 1), "priority", "invalid",
                           "priority must be an integer between 0 and 9.");
    }
    static const char *const bad_ttl[] = { "0", "2592001", "\"60\"" };
    for (size_t i = 0; i < sizeof bad_ttl / sizeof bad_ttl[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"ttl_seconds\":%s}", bad_ttl[i]));
        expect_field_error(expect_invalid(&r, path, 1), "ttl_seconds", "invalid",
                           "ttl_seconds must be an integer between 1 and 2592000 (30 days).");
    }

    http(&r, "POST", path, "{\"payload\":\"low\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);   /* nothing above created a message */
    assert_int_equal(e2e_jint(m, "priority"), 0);
    e2e_jnull(m, "expires_at");
    http(&r, "POST", path, "{\"payload\":\"high\",\"priority\":9,\"ttl_seconds\":60}");
    m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "priority"), 9);
    long long created = e2e_jtime(m, "created_at");
    assert_int_equal(e2e_jtime(m, "expires_at"), created + 60000);
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "priority"), 9);
    assert_int_equal(e2e_jtime(m, "expires_at"), created + 60000);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "priority"), 0);
    e2e_jnull(m, "expires_at");

    /* The listing shows the lane first, as claims take it. */
    http(&r, "GET", e2e_fmt("%s?status=pending", path), NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "priority"), 9);

    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":2}");
    list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "priority"), 9);
    assert_int_equal(e2e_jtime(rd_json_array_at(list, 0), "expires_at"), created + 60000);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 1), "id"), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 1), "priority"), 0);
    e2e_jnull(rd_json_array_at(list, 1), "expires_at");
    e2e_response_free(&r);
}

static void test_malformed_bodies_are_400(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "malformed");
    char path[1024];
    SET(path, messages_path(q));
    const char *bodies[] = { "{\"payload\":", "[\"payload\"]", "", "\"payload\"", "42",
                             "{\"payload\":\"x\"} trailing", "{payload:\"x\"}" };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        http(&r, "POST", path, bodies[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    /* A POST without any body at all is the same as an empty one. */
    http(&r, "POST", path, NULL);
    e2e_expect_problem(&r, 400, "malformed-request", path);
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\"}"), 1);
    e2e_response_free(&r);
}

static void test_queue_name_rules(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    char name[300];
    memset(name, 'n', 256);
    name[256] = '\0';
    char path[1024];
    SET(path, messages_path(name));
    http(&r, "POST", path, "{\"payload\":\"x\"}");
    char instance[257];   /* a problem's instance is the path's first 256 bytes */
    snprintf(instance, sizeof instance, "%.256s", path);
    expect_field_error(expect_invalid(&r, instance, 1), "queue", "invalid", NULL);

    /* 255 bytes is still a name (and it is free: its first id is 1). */
    char q[64];
    e2e_queue_name(q, sizeof q, "long");
    memset(name, 'n', 255);
    memcpy(name, q, strlen(q));
    name[255] = '\0';
    assert_int_equal(enqueue(name, "{\"payload\":\"x\"}"), 1);

    const char *bad[] = { "x%00y", "%1F", "a%0Ab", "%7F", "%C3%28", "%FF", "%ED%A0%80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        SET(path, messages_path(bad[i]));
        http(&r, "POST", path, "{\"payload\":\"x\"}");
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid", NULL);
        http(&r, "GET", message_path(bad[i], 1, NULL), NULL);
        expect_field_error(expect_invalid(&r, NULL, 1), "queue", "invalid", NULL);
    }
    e2e_response_free(&r);
}

static void test_odd_queue_names_are_distinct(void **state)
{
    (void)state;
    char plain[64], raw[160], decoded[160];
    e2e_queue_name(plain, sizeof plain, "a");
    /* Space, colon, braces, a percent sign and U+00E9 in one segment. */
    snprintf(raw, sizeof raw, "%s%%20:b{c}%%25%%C3%%A9", plain);
    snprintf(decoded, sizeof decoded, "%s :b{c}%%\xC3\xA9", plain);
    e2e_response_t r = { 0 };

    http(&r, "POST", messages_path(plain), "{\"payload\":\"plain\"}");
    expect_message(e2e_expect_json(&r, 201), 1, plain, "pending", 0, 3);
    http(&r, "POST", messages_path(raw), "{\"payload\":\"odd\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    expect_message(m, 1, decoded, "pending", 0, 3);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/1", raw));

    http(&r, "GET", message_path(plain, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "plain");
    http(&r, "GET", message_path(raw, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "payload"), "odd");
    assert_string_equal(e2e_jstr(m, "queue"), decoded);
    /* Each queue has its one message and no other. */
    http(&r, "GET", message_path(raw, 2, NULL), NULL);
    e2e_expect_problem(&r, 404, "not-found", NULL);

    /* "x:" and "x%3A" would share keys if '%' were not escaped too. */
    char colon[96], percent[96];
    snprintf(colon, sizeof colon, "%s%%3A", plain);      /* decodes to "<plain>:" */
    snprintf(percent, sizeof percent, "%s%%253A", plain); /* decodes to "<plain>%3A" */
    http(&r, "POST", messages_path(colon), "{\"payload\":\"colon\"}");
    expect_message(e2e_expect_json(&r, 201), 1, e2e_fmt("%s:", plain), "pending", 0, 3);
    http(&r, "POST", messages_path(percent), "{\"payload\":\"percent\"}");
    expect_message(e2e_expect_json(&r, 201), 1, e2e_fmt("%s%%3A", plain), "pending", 0, 3);
    http(&r, "GET", message_path(colon, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "colon");
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Reading, routing, limits                                                 */
/* ------------------------------------------------------------------------ */

static void test_get_and_not_found(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "get");
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"p\",\"max_retries\":4}");
    char created[32];
    snprintf(created, sizeof created, "%s", e2e_jstr(e2e_expect_json(&r, 201), "created_at"));

    char path[1024];
    SET(path, message_path(q, 1, NULL));
    http(&r, "GET", path, NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 0, 4);
    assert_string_equal(e2e_jstr(m, "payload"), "p");
    assert_string_equal(e2e_jstr(m, "created_at"), created);

    SET(path, message_path(q, 999, NULL));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, e2e_fmt("/queues/%s/messages/abc", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, e2e_fmt("/queues/%s/messages/0", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, message_path(q, 999, "succeed"));
    http(&r, "POST", path, "{}");
    e2e_expect_problem(&r, 404, "not-found", path);

    http(&r, "GET", "/nope", NULL);
    e2e_expect_problem(&r, 404, "not-found", "/nope");
    SET(path, e2e_fmt("/queues/%s/bogus", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    e2e_response_free(&r);
}

static void test_wrong_method_is_405_with_allow(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    http(&r, "DELETE", "/queues/q/messages", NULL);
    e2e_expect_problem(&r, 405, "method-not-allowed", "/queues/q/messages");
    if (!e2e_list_has(r.allow, "GET") || !e2e_list_has(r.allow, "POST"))
        fail_msg("Allow \"%s\" must list GET and POST", r.allow);

    http(&r, "GET", "/queues/q/claim", NULL);
    e2e_expect_problem(&r, 405, "method-not-allowed", "/queues/q/claim");
    assert_true(e2e_list_has(r.allow, "POST"));
    e2e_response_free(&r);
}

/* The OpenAPI document of docs/ is what GET /openapi.json serves, byte for
 * byte, without a token when auth is on; and it has one operation for every
 * row of the route table and no other (a route added without its
 * description fails here). */
static const char *method_key(rd_http_method_t m)
{
    switch (m) {
    case RD_HTTP_GET: return "get";
    case RD_HTTP_POST: return "post";
    case RD_HTTP_PUT: return "put";
    case RD_HTTP_PATCH: return "patch";
    case RD_HTTP_DELETE: return "delete";
    default: return "other";
    }
}

static char *read_file_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

static void test_openapi_document_is_served(void **state)
{
    (void)state;
    size_t file_len = 0;
    char *file = read_file_all("docs/openapi.json", &file_len);
    if (file == NULL) fail_msg("cannot read docs/openapi.json (run from the source tree)");

    char prefix[80], token_file[128];
    snprintf(prefix, sizeof prefix, "%s-oa", g_prefix);
    snprintf(token_file, sizeof token_file, "/tmp/retryd-e2e-token-%ld", (long)getpid());
    FILE *tf = fopen(token_file, "w");
    assert_non_null(tf);
    fputs("s3cret-openapi-token\n", tf);
    fclose(tf);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file",
                                  token_file, NULL), 0);
    unlink(token_file);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "GET", "/queues", NULL, 0);
    e2e_expect_problem(&r, 401, "unauthorized", "/queues");
    http_to(g_side.port, &r, "GET", "/openapi.json", NULL, 0);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(r.body_len, file_len);
    assert_memory_equal(r.body, file, file_len);
    free(file);
    assert_string_equal(e2e_jstr(doc, "openapi"), "3.1.0");

    const rd_json_t *paths = e2e_jget(doc, "paths");
    size_t described = 0;
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        const char *key = method_key(rt->method);
        const rd_json_t *item = rd_json_get(paths, rt->pattern);
        if (item == NULL || rd_json_get(item, key) == NULL)
            fail_msg("route %s %s is not in docs/openapi.json", key, rt->pattern);
        described++;
        if (rt->flags & RD_ROUTE_PREFIX) {   /* "/ui": also "/ui/" and "/ui/{asset}" */
            const char *under[] = { e2e_fmt("%s/", rt->pattern), e2e_fmt("%s/{asset}", rt->pattern) };
            for (int u = 0; u < 2; u++) {
                item = rd_json_get(paths, under[u]);
                if (item == NULL || rd_json_get(item, key) == NULL)
                    fail_msg("route %s %s is not in docs/openapi.json", key, under[u]);
                described++;
            }
        }
        bool public_route = (rt->flags & RD_ROUTE_PUBLIC) != 0;
        const rd_json_t *security = rd_json_get(rd_json_get(item, key), "security");
        bool open = security != NULL && rd_json_array_size(security) == 0;
        if (public_route != open)
            fail_msg("%s %s: public in the route table: %d, in the document: %d", key,
                     rt->pattern, public_route, open);
    }
    /* and no operation the table does not have: every operation of the
     * document has an operationId. */
    size_t operations = 0;
    for (const char *p = r.body; (p = strstr(p, "\"operationId\":")) != NULL; p++) operations++;
    assert_int_equal(operations, described);
    e2e_response_free(&r);
}

/* With --auth-token-file the public rows of the route table (/healthz,
 * /openapi.json, the console's files under /ui) answer without the token
 * and every other route is 401; README's flag row and --help name exactly
 * those public routes (they said "every route but /healthz"). */
static void test_public_routes_are_documented(void **state)
{
    (void)state;
    char prefix[80], token_file[128];
    snprintf(prefix, sizeof prefix, "%s-pub", g_prefix);
    snprintf(token_file, sizeof token_file, "/tmp/retryd-e2e-pub-token-%ld", (long)getpid());
    FILE *tf = fopen(token_file, "w");
    assert_non_null(tf);
    fputs("s3cret-public-token\n", tf);
    fclose(tf);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file",
                                  token_file, NULL), 0);
    unlink(token_file);

    size_t readme_len = 0;
    char *readme = read_file_all("README.md", &readme_len);
    if (readme == NULL) fail_msg("cannot read README.md (run from the source tree)");
    readme = realloc(readme, readme_len + 1);
    readme[readme_len] = '\0';
    char *row = strstr(readme, "| `--auth-token-file` |");
    assert_non_null(row);
    char *eol = strchr(row, '\n');
    if (eol) *eol = '\0';
    char help[16384];
    rd_config_t cfg;
    const char *argv[] = { "retryd", "--help", NULL };
    assert_int_equal(rd_config_load(&cfg, 2, (char **)argv, help, sizeof help), 1);
    char *flag = strstr(help, "--auth-token-file");
    assert_non_null(flag);
    char *next = strstr(flag + 2, "\n  --");
    if (next) *next = '\0';

    e2e_response_t r = { 0 };
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        char path[256];
        size_t n = 0;
        for (const char *p = rt->pattern; *p && n + 2 < sizeof path; p++) {
            if (*p == '{') {
                bool queue = p[1] == 'q';
                p = strchr(p, '}');
                n += (size_t)snprintf(path + n, sizeof path - n, "%s", queue ? "pubq" : "1");
            } else {
                path[n++] = *p;
            }
        }
        path[n] = '\0';
        const char *method = rt->method == RD_HTTP_GET ? "GET" : rt->method == RD_HTTP_POST
                                 ? "POST" : rt->method == RD_HTTP_PUT ? "PUT"
                                 : rt->method == RD_HTTP_PATCH ? "PATCH" : "DELETE";
        const char *body = rt->method == RD_HTTP_GET || rt->method == RD_HTTP_DELETE ? NULL : "{}";
        bool public_route = (rt->flags & RD_ROUTE_PUBLIC) != 0;
        const char *paths[2] = { path, rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("%s/app.js", path) : NULL };
        for (int k = 0; k < 2 && paths[k]; k++) {
            http_to(g_side.port, &r, method, paths[k], body, body ? strlen(body) : 0);
            if (public_route && (r.status == 401 || r.status >= 500))
                fail_msg("%s %s is public in the route table, answered %d", method, paths[k],
                         r.status);
            if (!public_route && r.status != 401)
                fail_msg("%s %s without the token: %d, want 401", method, paths[k], r.status);
        }
        if (!public_route) continue;
        const char *named = rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("`%s/*`", rt->pattern)
                                                        : e2e_fmt("`%s`", rt->pattern);
        if (strstr(row, named) == NULL)
            fail_msg("README's --auth-token-file row does not name the public route %s: %s", named,
                     row);
        const char *bare = rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("%s/*", rt->pattern) : rt->pattern;
        if (strstr(flag, bare) == NULL)
            fail_msg("--help for --auth-token-file does not name the public route %s: %s", bare,
                     flag);
    }
    /* and no other route is called public there. */
    static const char *const private_routes[] = { "`/readyz`", "`/metrics`", "`/queues`" };
    for (size_t i = 0; i < 3; i++)
        if (strstr(row, private_routes[i])) fail_msg("README names %s as public", private_routes[i]);
    free(readme);
    e2e_response_free(&r);
}

static void test_body_over_max_body_is_413(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-max", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--max-body", "65536",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "big");
    char path[1024];
    SET(path, messages_path(q));
    enum { UNDER = 60000, OVER = 70000 };
    char *body = malloc(OVER + 1);
    e2e_response_t r = { 0 };

    /* {"payload":"aaa...a"} of exactly n bytes. */
    for (int n = UNDER; n <= OVER; n += OVER - UNDER) {
        memset(body, 'a', (size_t)n);
        memcpy(body, "{\"payload\":\"", 12);
        memcpy(body + n - 2, "\"}", 2);
        body[n] = '\0';
        http_to(g_side.port, &r, "POST", path, body, (size_t)n);
        if (n == UNDER) expect_message(e2e_expect_json(&r, 201), 1, q, "pending", 0, 3);
        else e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    }
    free(body);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    /* SIGINT stops it as cleanly as SIGTERM (docs/reference.md "Daemon"). */
    assert_int_equal(e2e_daemon_stop(&g_side, SIGINT, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                  */
/* ------------------------------------------------------------------------ */

/* Follows next_cursor from the first page of query; marks each id seen and
 * returns how many messages came. Every page has `total` and at most limit. */
static size_t list_all(const char *q, const char *query, int limit, const char *status,
                       long long total, int *seen, size_t seen_cap)
{
    e2e_response_t r = { 0 };
    char cursor[512] = "";
    size_t count = 0;
    for (int page = 0; page < 50; page++) {
        const char *path = cursor[0]
            ? e2e_fmt("%s?%s&limit=%d&cursor=%s", messages_path(q), query, limit,
                      e2e_url_encode(cursor))
            : e2e_fmt("%s?%s&limit=%d", messages_path(q), query, limit);
        http(&r, "GET", path, NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(doc, "total"), total);
        rd_json_t *list = e2e_jget(doc, "messages");
        assert_true(rd_json_is_array(list));
        assert_true(rd_json_array_size(list) <= (size_t)limit);
        for (size_t i = 0; i < rd_json_array_size(list); i++) {
            rd_json_t *m = rd_json_array_at(list, i);
            long long id = e2e_jint(m, "id");
            assert_true(id >= 1 && (size_t)id < seen_cap);
            seen[id]++;
            count++;
            if (status) assert_string_equal(e2e_jstr(m, "status"), status);
        }
        rd_json_t *next = e2e_jget(doc, "next_cursor");
        if (rd_json_is_null(next)) {
            e2e_response_free(&r);
            return count;
        }
        assert_true(rd_json_is_string(next));
        snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    }
    fail_msg("next_cursor never became null");
    return count;
}

static void test_list_and_paging(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "list");
    for (int i = 1; i <= 7; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i));
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":3}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", message_path(q, 2, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    /* Pending but scheduled far ahead: still listed as pending. */
    http(&r, "POST", message_path(q, 3, "fail"), "{\"error\":\"x\",\"retry_after_seconds\":600}");
    e2e_expect_json(&r, 200);

    int seen[16] = { 0 };
    assert_int_equal(list_all(q, "status=dead", 100, "dead", 2, seen, 16), 2);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 1);

    /* Pending now spans a replayed id, fresh ids and a scheduled retry. */
    http(&r, "POST", message_path(q, 2, "replay"), NULL);
    e2e_expect_json(&r, 200);
    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=pending", 2, "pending", 6, seen, 16), 6);
    for (int id = 2; id <= 7; id++) assert_int_equal(seen[id], 1);
    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=dead", 1, "dead", 1, seen, 16), 1);
    assert_int_equal(seen[1], 1);

    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=processing", 10, "processing", 0, seen, 16), 0);

    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "x=1", 3, NULL, 7, seen, 16), 7);
    for (int id = 1; id <= 7; id++) assert_int_equal(seen[id], 1);

    /* Without limit, the first page holds them all. */
    http(&r, "GET", e2e_fmt("%s?status=pending", messages_path(q)), NULL);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(doc, "messages")), 6);
    e2e_jnull(doc, "next_cursor");
    e2e_response_free(&r);
}

static void test_list_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "listval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    const struct { const char *query, *field; } cases[] = {
        { "status=bogus", "status" },
        { "status=", "status" },
        { "limit=0", "limit" },
        { "limit=1001", "limit" },
        { "limit=abc", "limit" },
        { "cursor=garbage", "cursor" },
        { "status=pending&cursor=garbage", "cursor" },
        { "status=dead&cursor=garbage", "cursor" },
    };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "GET", e2e_fmt("%s?%s", path, cases[i].query), NULL);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, "invalid", NULL);
    }
    http(&r, "GET", e2e_fmt("%s?status=bogus&limit=0", path), NULL);
    rd_json_t *errors = expect_invalid(&r, path, 2);
    expect_field_error(errors, "status", "invalid", NULL);
    expect_field_error(errors, "limit", "invalid", NULL);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Strict input: raw control bytes, numbers, query values, odd names        */
/* ------------------------------------------------------------------------ */

/* body with its "@" replaced by the raw byte b, sent as is (length given,
 * so a NUL goes out too). */
static void http_with_byte(e2e_response_t *r, const char *method, const char *path,
                           const char *body, char b)
{
    char buf[512];
    size_t len = strlen(body);
    assert_true(len < sizeof buf);
    memcpy(buf, body, len);
    char *at = memchr(buf, '@', len);
    assert_non_null(at);
    *at = b;
    http_to(g_daemon.port, r, method, path, buf, len);
}

/* RFC 8259 allows no raw control byte in a string. cJSON took them, and a
 * raw NUL cut the string there: "head\0tail" was stored as "head", two
 * idempotency keys differing after one were "the same", and an error, a
 * redrive's "to", a rule's error_contains and alert_url were cut too. Each
 * is now 400 malformed-request and nothing is done. */
static void test_raw_control_bytes_are_400(void **state)
{
    (void)state;
    char q[64], path[1024];
    e2e_queue_name(q, sizeof q, "rawctl");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char bytes[] = { '\0', '\x01', '\t', '\n', '\x1f' };
    for (size_t i = 0; i < sizeof bytes; i++) {
        http_with_byte(&r, "POST", path, "{\"payload\":\"head@tail\"}", bytes[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
        http_with_byte(&r, "POST", path, "{\"payload\":\"x\",\"idempotency_key\":\"order@-41\"}",
                       bytes[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    /* Nothing was enqueued: the first real message is id 1, and keys that
     * differ after the byte position are two messages. */
    http(&r, "POST", path, "{\"payload\":\"a\",\"idempotency_key\":\"order\\u0001-41\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    http(&r, "POST", path, "{\"payload\":\"b\",\"idempotency_key\":\"order\\u0001-42\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 2);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "a");

    /* fail's error and a settlement's error: the message stays processing. */
    char token[128], fpath[1024];
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    SET(fpath, message_path(q, 1, "fail"));
    http_with_byte(&r, "POST", fpath, "{\"error\":\"disk full@ on /dev/sda1\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", fpath);
    char cpath[1024];
    SET(cpath, e2e_fmt("/queues/%s/claim", q));
    http_with_byte(&r, "POST", cpath,
                   "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"disk@full\"}]}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", cpath);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    e2e_jnull(m, "last_error");

    /* A redrive's "to" and a replay's error_contains: the letter stays dead. */
    char dq[64], rpath[1024];
    e2e_queue_name(dq, sizeof dq, "rawctl-dead");
    long long dead = make_dead(dq, "p", "smtp timeout");
    SET(rpath, e2e_fmt("/queues/%s/replay", dq));
    http_with_byte(&r, "POST", rpath, e2e_fmt("{\"all\":true,\"to\":\"%s@x\"}", dq), '\0');
    e2e_expect_problem(&r, 400, "malformed-request", rpath);
    http_with_byte(&r, "POST", rpath, "{\"error_contains\":\"smtp@\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", rpath);
    http(&r, "GET", message_path(dq, dead, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");

    /* A rule's error_contains and alert_url: the policy is unchanged. */
    char ppath[1024];
    SET(ppath, e2e_fmt("/queues/%s/policy", dq));
    http_with_byte(&r, "PUT", ppath,
                   "{\"dead_letter_rules\":[{\"error_contains\":\"4@29\",\"action\":\"dead\"}]}",
                   '\0');
    e2e_expect_problem(&r, 400, "malformed-request", ppath);
    http_with_byte(&r, "PUT", ppath, "{\"alert_url\":\"http://127.0.0.1:9/a@b\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", ppath);
    http(&r, "GET", ppath, NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(m, "dead_letter_rules")), 0);
    e2e_jnull(m, "alert_url");
    e2e_response_free(&r);
}

/* Numbers are strict JSON: "010" was read as 10. */
static void test_leading_zeros_are_400(void **state)
{
    (void)state;
    char q[64], path[1024];
    e2e_queue_name(q, sizeof q, "zeros");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char *const bad[] = { "010", "-01", "00", "01.5", "1.", ".5", "+3" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"max_retries\":%s}", bad[i]));
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"max_in_flight\":007}");
    e2e_expect_problem(&r, 400, "malformed-request", NULL);
    http(&r, "POST", path, "{\"payload\":\"x\",\"max_retries\":10,\"delay_seconds\":0}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "max_retries"), 10);
    e2e_response_free(&r);
}

/* Query values are limited by their decoded length: a 192-byte
 * error_contains with punctuation (272 characters encoded) and 43 x U+00E9
 * (86 bytes, 258 characters) were 422; they filter as any other. */
static void test_query_limits_apply_to_decoded_values(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "decoded");
    char punct[200], accents[100];
    size_t n = 0;
    for (int i = 0; i < 20; i++) n += (size_t)snprintf(punct + n, sizeof punct - n, "a:/");
    while (n < 192) punct[n++] = 'b';
    punct[n] = '\0';
    n = 0;
    for (int i = 0; i < 43; i++) n += (size_t)snprintf(accents + n, sizeof accents - n, "\xC3\xA9");
    const char *errors[] = { punct, accents };
    long long ids[2];
    for (int i = 0; i < 2; i++) {
        size_t len;
        char *body = e2e_json_with_string("error", e2e_fmt("%s (x)", errors[i]), &len);
        ids[i] = enqueue(q, e2e_fmt("{\"payload\":\"p%d\",\"max_retries\":1}", i));
        assert_int_equal(claim_one(q, 30, NULL, 0), ids[i]);
        e2e_response_t f = { 0 };
        http_to(g_daemon.port, &f, "POST", message_path(q, ids[i], "fail"), body, len);
        assert_string_equal(e2e_jstr(e2e_expect_json(&f, 200), "status"), "dead");
        e2e_response_free(&f);
        rd_free(body);
    }
    /* punct encoded: "a%3A%2F" x 20 + "b" x 132 = 272 characters. */
    char enc[1024];
    n = 0;
    for (int i = 0; i < 20; i++) n += (size_t)snprintf(enc + n, sizeof enc - n, "a%%3A%%2F");
    for (int i = 0; i < 132; i++) enc[n++] = 'b';
    enc[n] = '\0';
    assert_int_equal(strlen(enc), 272);
    const char *queries[] = { enc, e2e_url_encode(accents) };
    e2e_response_t r = { 0 };
    for (int i = 0; i < 2; i++) {
        http(&r, "GET", e2e_fmt("%s?status=dead&error_contains=%s", messages_path(q), queries[i]),
             NULL);
        rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
        assert_int_equal(rd_json_array_size(list), 1);
        assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), ids[i]);
    }
    /* 256 decoded bytes are still refused, on the field. */
    char big[300];
    memset(big, 'x', 256);
    big[256] = '\0';
    char path[1024];
    SET(path, messages_path(q));
    http(&r, "GET", e2e_fmt("%s?error_contains=%s", path, big), NULL);
    expect_field_error(expect_invalid(&r, path, 1), "error_contains", "invalid", NULL);
    e2e_response_free(&r);
}

/* GET /queues pages by name: a page that ends on a 200-byte name, or on a
 * name with non-ASCII letters, gave a next_cursor that the next request
 * refused (the encoded cursor was length-checked), so every later queue was
 * out of reach. Paging one queue a page goes through all of them. */
static void test_queues_cursor_on_long_and_non_ascii_names(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-qcur", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, NULL), 0);
    enum { NAMES = 4 };
    char names[NAMES][256];
    for (int i = 0; i < 200; i++) names[0][i] = "a :/"[i % 4];   /* 200 bytes, 500 encoded */
    names[0][200] = '\0';
    names[1][0] = '\0';                     /* 200 bytes of U+00E9, 600 encoded */
    for (int i = 0; i < 100; i++) strcat(names[1], "\xC3\xA9");
    snprintf(names[2], sizeof names[2], "b-caf\xC3\xA9-\xE6\x97\xA5\xE6\x9C\xAC");
    snprintf(names[3], sizeof names[3], "\xE6\x97\xA5-last");
    e2e_response_t r = { 0 };
    for (int i = 0; i < NAMES; i++) {
        http_to(g_side.port, &r, "POST", messages_path(e2e_url_encode(names[i])),
                "{\"payload\":\"x\"}", 15);
        e2e_expect_json(&r, 201);
    }
    char cursor[256] = "";
    int seen = 0;
    for (int page = 0;; page++) {
        if (page > NAMES) fail_msg("GET /queues does not end");
        const char *path = cursor[0] ? e2e_fmt("/queues?limit=1&cursor=%s", e2e_url_encode(cursor))
                                     : "/queues?limit=1";
        http_to(g_side.port, &r, "GET", path, NULL, 0);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *list = e2e_jget(doc, "queues");
        if (rd_json_array_size(list) == 1) {
            const char *name = e2e_jstr(rd_json_array_at(list, 0), "name");
            /* Name order is byte order: "a :/...", "b-caf...", U+00E9s, U+65E5. */
            static const int order[NAMES] = { 0, 2, 1, 3 };
            assert_true(seen < NAMES);
            assert_string_equal(name, names[order[seen]]);
            seen++;
        }
        rd_json_t *next = rd_json_get(doc, "next_cursor");
        assert_non_null(next);
        if (rd_json_is_null(next)) break;
        snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    }
    assert_int_equal(seen, NAMES);
    e2e_response_free(&r);
}

/* "." and ".." as a queue: browsers and curl collapse such path steps, so
 * the console could not manage the queue. Refused, raw or encoded. */
static void test_dot_queue_names_refused(void **state)
{
    (void)state;
    static const char *const names[] = { ".", "..", "%2E", "%2e%2E", ".%2E" };
    e2e_response_t r = { 0 };
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        SET(path, messages_path(names[i]));
        http(&r, "POST", path, "{\"payload\":\"x\"}");
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid",
                           "queue must not be \".\" or \"..\".");
        SET(path, e2e_fmt("/queues/%s/stats", names[i]));
        http(&r, "GET", path, NULL);
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid", NULL);
    }
    /* ... nor a redrive's target; "..." is a name like any other. */
    char q[64];
    e2e_queue_name(q, sizeof q, "dots");
    long long dead = make_dead(q, "p", "boom");
    SET(path, e2e_fmt("/queues/%s/replay", q));
    http(&r, "POST", path, "{\"all\":true,\"to\":\"..\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "GET", message_path(q, dead, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    char three[80];
    snprintf(three, sizeof three, "...%s", q);
    assert_int_equal(enqueue(three, "{\"payload\":\"x\"}"), 1);
    e2e_response_free(&r);
}

/* since/until on a day the calendar has not (2026-02-31 was read as
 * 2026-03-03) are 422 on the field. */
static void test_impossible_dates_refused(void **state)
{
    (void)state;
    char q[64], path[256];
    e2e_queue_name(q, sizeof q, "dates");
    enqueue(q, "{\"payload\":\"x\"}");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char *const bad[] = { "2026-02-31T00:00:00Z", "2026-02-29T10:00:00Z",
                                       "2026-04-31T00:00:00Z" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "GET", e2e_fmt("%s?since=%s", path, bad[i]), NULL);
        expect_field_error(expect_invalid(&r, path, 1), "since", "invalid", NULL);
        http(&r, "GET", e2e_fmt("%s?until=%s", path, bad[i]), NULL);
        expect_field_error(expect_invalid(&r, path, 1), "until", "invalid", NULL);
    }
    http(&r, "GET", e2e_fmt("%s?since=2028-02-29T00:00:00Z", path), NULL);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
}

/* Each message has one path: /messages/001 was message 1. A non-canonical
 * id (leading zero, sign) is 404, on every message route. */
static void test_non_canonical_message_id_is_404(void **state)
{
    (void)state;
    char q[64], path[256];
    e2e_queue_name(q, sizeof q, "canon");
    assert_int_equal(enqueue(q, "{\"payload\":\"x\"}"), 1);
    e2e_response_t r = { 0 };
    static const char *const ids[] = { "001", "01", "+1", "-1", "1.0", "0x1" };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        SET(path, e2e_fmt("/queues/%s/messages/%s", q, ids[i]));
        http(&r, "GET", path, NULL);
        e2e_expect_problem(&r, 404, "not-found", path);
        SET(path, e2e_fmt("/queues/%s/messages/%s/kill", q, ids[i]));
        http(&r, "POST", path, "{}");
        e2e_expect_problem(&r, 404, "not-found", path);
    }
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "pending");
    e2e_response_free(&r);
}

/* A problem's instance is the request's path, cut to its first 256 bytes on
 * a character boundary: a 12 KB path was echoed whole. */
static void test_problem_instance_is_truncated(void **state)
{
    (void)state;
    enum { LONG = 12 * 1024 };
    char *path = malloc(LONG + 1);
    assert_non_null(path);
    memcpy(path, "/nope/", 6);
    /* U+00E9 percent-encoded is 6 bytes: byte 256 falls inside one. */
    for (size_t n = 6; n < LONG; n++) path[n] = "%C3%A9"[(n - 6) % 6];
    path[LONG] = '\0';
    e2e_response_t r = { 0 };
    http(&r, "GET", path, NULL);
    rd_json_t *p = e2e_expect_problem(&r, 404, "not-found", NULL);
    const char *instance = e2e_jstr(p, "instance");
    size_t n = strlen(instance);
    if (n > 256) fail_msg("instance is %zu bytes", n);
    assert_true(n >= 250);
    assert_memory_equal(instance, path, n);
    free(path);

    /* Multi-byte characters are not split: a queue of 200 x U+00E9. */
    char name[512] = "", raw[2048] = "";
    for (int i = 0; i < 200; i++) strcat(name, "\xC3\xA9");
    snprintf(raw, sizeof raw, "/queues/%s/bogus", name);
    http(&r, "GET", raw, NULL);
    p = e2e_expect_problem(&r, 404, "not-found", NULL);
    instance = e2e_jstr(p, "instance");
    n = strlen(instance);
    assert_true(n <= 256 && n >= 253);
    assert_memory_equal(instance, raw, n);
    assert_null(strstr(instance, "\xEF\xBF\xBD"));   /* no U+FFFD from a cut sequence */
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Text is UTF-8 (docs/reference.md "Text")                                           */
/* ------------------------------------------------------------------------ */

static void test_text_must_be_utf8(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "utf8");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    e2e_response_t r = { 0 };

    /* Raw bytes that are not UTF-8, and a lone surrogate escape: 422 on the
     * field, and nothing is stored. */
    static const char *const bad[] = { "\xff\xfe", "\xC0\xAF", "\xED\xA0\x80", "ok\xF4\x90\x80\x80",
                                       "\\ud800", "x\\udc00y" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"%s\"}", bad[i]));
        expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid",
                           "payload must be valid UTF-8.");
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"p\",\"idempotency_key\":\"%s\"}", bad[i]));
        expect_field_error(expect_invalid(&r, path, 1), "idempotency_key", "invalid", NULL);
    }
    long long id = enqueue(q, "{\"payload\":\"caf\xC3\xA9 \\ud83d\\ude00\"}");
    assert_int_equal(id, 1);
    char token[160];
    assert_int_equal(claim_one(q, 60, token, sizeof token), 1);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"\xff oops\"}");
    expect_field_error(expect_invalid(&r, message_path(q, 1, "fail"), 1), "error", "invalid",
                       "error must be valid UTF-8.");
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q), "{\"error_contains\":\"\\udfff\"}");
    expect_field_error(expect_invalid(&r, NULL, 1), "error_contains", "invalid", NULL);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(expect_strict_json(&r), "payload"),
                        "caf\xC3\xA9 \xF0\x9F\x98\x80");

    /* A message written without the API (retryctl, redis-cli, or before this
     * check existed) with raw bytes in payload and last_error: every answer
     * that holds it is still strict JSON, the bad bytes as U+FFFD. */
    const char *base = e2e_fmt("%s:{%s}", g_prefix, q);
    redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 1 0 %s", base,
                             "\xff\xfe", (size_t)2, "");
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    assert_int_equal(claim_one(q, 60, token, sizeof token), 2);
    x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("fail") " 2 %s %s:m:2 2 %s %b 0 -1", base, base,
                 token,
                 "bad \xC3(", (size_t)6);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    static const char *const listings[] = { "", "?status=dead" };
    for (size_t i = 0; i < 2; i++) {
        http(&r, "GET", e2e_fmt("%s%s", path, listings[i]), NULL);
        rd_json_t *doc = expect_strict_json(&r);
        rd_json_t *list = e2e_jget(doc, "messages");
        assert_int_equal(rd_json_array_size(list), 2);
        bool seen = false;
        for (size_t k = 0; k < 2; k++) {
            rd_json_t *m = rd_json_array_at(list, k);
            if (e2e_jint(m, "id") != 2) continue;
            seen = true;
            assert_string_equal(e2e_jstr(m, "payload"), "\xEF\xBF\xBD\xEF\xBF\xBD");
            assert_string_equal(e2e_jstr(m, "last_error"), "bad \xEF\xBF\xBD(");
        }
        assert_true(seen);
    }
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    expect_strict_json(&r);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    expect_strict_json(&r);
    http(&r, "POST", message_path(q, 2, "replay"), NULL);
    expect_strict_json(&r);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":5}");
    expect_strict_json(&r);
    e2e_response_free(&r);
}

/* DELETE /queues/{q}: the queue's messages in every state, its policy and
 * its keys go (nothing with its hash tag is left in Redis but the claim's
 * 15-second lost-answer record), GET /queues no
 * longer lists it, a second DELETE is 204 too, and the next enqueue makes
 * a new queue (id 1). */
static void test_delete_queue_drops_everything(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "dropq");
    e2e_response_t r = { 0 };
    for (int i = 0; i < 5; i++)
        enqueue(q, e2e_fmt("{\"payload\":\"p\",\"idempotency_key\":\"k%d\"}", i));
    for (int i = 0; i < 5; i++) enqueue(q, "{\"payload\":\"d\",\"delay_seconds\":600}");
    enqueue(q, "{\"payload\":\"x\"}");
    char token[128];
    claim_one(q, 60, token, sizeof token);
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"lease_seconds\":90}");
    e2e_expect_json(&r, 200);

    http(&r, "DELETE", e2e_fmt("/queues/%s", q), NULL);
    e2e_expect_no_content(&r);
    redisReply *keys = redisCommand(g_redis, "KEYS *{%s}*", q);
    assert_non_null(keys);
    /* Only the claim's lost-answer record (docs/durability.md "A claim whose
     * answer is lost") may be left, expiring within 15 s by itself. */
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        if (strstr(k, "}:claim:") == NULL) fail_msg("left after the drop: %s", k);
        redisReply *ttl = redisCommand(g_redis, "PTTL %s", k);
        assert_true(ttl->integer > 0 && ttl->integer <= 15000);
        freeReplyObject(ttl);
    }
    assert_true(keys->elements <= 1);
    freeReplyObject(keys);
    http(&r, "GET", "/queues?limit=1000", NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "queues");
    for (size_t i = 0; i < rd_json_array_size(list); i++)
        assert_string_not_equal(e2e_jstr(rd_json_array_at(list, i), "name"), q);
    http(&r, "DELETE", e2e_fmt("/queues/%s", q), NULL);
    e2e_expect_no_content(&r);
    assert_int_equal(enqueue(q, "{\"payload\":\"again\"}"), 1);
    /* Its policy is gone: lease_seconds is the default again. */
    http(&r, "GET", e2e_fmt("/queues/%s/policy", q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "lease_seconds"), 30);
    e2e_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_enqueue_returns_message_and_location),
        T(test_payload_is_returned_byte_for_byte),
        T(test_enqueue_validation),
        T(test_enqueue_priority_and_ttl),
        T(test_malformed_bodies_are_400),
        T(test_queue_name_rules),
        T(test_odd_queue_names_are_distinct),
        T(test_get_and_not_found),
        T(test_wrong_method_is_405_with_allow),
        T(test_openapi_document_is_served),
        T(test_public_routes_are_documented),
        T(test_body_over_max_body_is_413),
        T(test_list_and_paging),
        T(test_list_validation),
        T(test_raw_control_bytes_are_400),
        T(test_leading_zeros_are_400),
        T(test_query_limits_apply_to_decoded_values),
        T(test_queues_cursor_on_long_and_non_ascii_names),
        T(test_dot_queue_names_refused),
        T(test_impossible_dates_refused),
        T(test_non_canonical_message_id_is_404),
        T(test_problem_instance_is_truncated),
        T(test_text_must_be_utf8),
        T(test_delete_queue_drops_everything),
    };
    int failed = cmocka_run_group_tests_name("e2e_routes", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
