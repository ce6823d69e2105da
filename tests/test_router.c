/* test_router.c - unit tests for router.c over the API's route table
 * (rd_api_routes): every route, path parameters, 404/405 outcomes, prefix
 * rows and percent-decoding (docs/reference.md "Queue names and ids"). Pure: nothing of the table's handlers
 * runs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/api.h"
#include "retryd/router.h"

/* The rows of rd_api_routes, as "METHOD pattern" (route_name). */
#define ROUTE_HEALTHZ "GET /healthz"
#define ROUTE_READYZ "GET /readyz"
#define ROUTE_OPENAPI "GET /openapi.json"
#define ROUTE_ENQUEUE "POST /queues/{q}/messages"
#define ROUTE_LIST "GET /queues/{q}/messages"
#define ROUTE_GET "GET /queues/{q}/messages/{id}"
#define ROUTE_CLAIM "POST /queues/{q}/claim"
#define ROUTE_DROP_QUEUE "DELETE /queues/{q}"
#define ROUTE_SUCCEED "POST /queues/{q}/messages/{id}/succeed"
#define ROUTE_FAIL "POST /queues/{q}/messages/{id}/fail"
#define ROUTE_REPLAY "POST /queues/{q}/messages/{id}/replay"
#define ROUTE_EXTEND "POST /queues/{q}/messages/{id}/extend"
#define ROUTE_SNOOZE "POST /queues/{q}/messages/{id}/snooze"
#define ROUTE_UI "GET /ui"

/* The API's table, as the server matches it. */
static rd_route_outcome_t route_match(rd_http_method_t method, const char *path, size_t len,
                                      rd_route_match_t *m)
{
    return rd_router_match(rd_api_routes, rd_api_route_count, method, path, len, m);
}

/* "METHOD pattern" of a row; "" for none. */
static const char *route_name(const rd_route_t *r)
{
    static char name[96];
    if (r == NULL) return "";
    const char *method = r->method == RD_HTTP_GET      ? "GET"
                         : r->method == RD_HTTP_POST   ? "POST"
                         : r->method == RD_HTTP_DELETE ? "DELETE"
                                                       : "?";
    snprintf(name, sizeof name, "%s %s", method, r->pattern);
    return name;
}

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

/* Matches and copies out what the tests look at, freeing the match before any
 * assertion so that a failing test leaks nothing. */
typedef struct result {
    rd_route_outcome_t outcome;
    char route[96];
    bool has_queue;
    char queue[256];
    size_t queue_len;
    bool queue_decoded;
    long long id;
    char allow[64];
} result_t;

static result_t match(rd_http_method_t method, const char *path)
{
    rd_route_match_t m;
    result_t r;
    memset(&r, 0, sizeof r);
    r.outcome = route_match(method, path, strlen(path), &m);
    snprintf(r.route, sizeof r.route, "%s", route_name(m.route));
    r.has_queue = m.queue != NULL;
    if (m.queue) {
        size_t n = m.queue_len < sizeof r.queue - 1 ? m.queue_len : sizeof r.queue - 1;
        memcpy(r.queue, m.queue, n);
        r.queue[n] = '\0';
    }
    r.queue_len = m.queue_len;
    r.queue_decoded = m.queue_decoded;
    r.id = m.id;
    memcpy(r.allow, m.allow, sizeof r.allow);
    r.allow[sizeof r.allow - 1] = '\0';
    rd_route_match_free(&m);
    return r;
}

static const char *outcome_name(rd_route_outcome_t o)
{
    switch (o) {
    case RD_ROUTE_MATCHED: return "MATCHED";
    case RD_ROUTE_NO_PATH: return "NO_PATH";
    case RD_ROUTE_NO_METHOD: return "NO_METHOD";
    case RD_ROUTE_BAD_ID: return "BAD_ID";
    }
    return "?";
}

static void assert_route(rd_http_method_t method, const char *path, const char *route,
                         const char *queue, long long id)
{
    result_t r = match(method, path);
    if (r.outcome != RD_ROUTE_MATCHED)
        fail_msg("%s: outcome %s, want MATCHED", path, outcome_name(r.outcome));
    assert_string_equal(r.route, route);
    if (queue) {
        assert_true(r.has_queue);
        assert_true(r.queue_decoded);
        assert_string_equal(r.queue, queue);
        assert_int_equal(r.queue_len, strlen(queue));
    } else {
        assert_false(r.has_queue);
    }
    assert_int_equal(r.id, id);
}

static void assert_outcome(rd_http_method_t method, const char *path, rd_route_outcome_t want)
{
    result_t r = match(method, path);
    if (r.outcome != want)
        fail_msg("method %d %s: outcome %s (allow \"%s\"), want %s", (int)method, path,
                 outcome_name(r.outcome), r.allow, outcome_name(want));
}

static void assert_no_method(rd_http_method_t method, const char *path, const char *allow)
{
    result_t r = match(method, path);
    if (r.outcome != RD_ROUTE_NO_METHOD)
        fail_msg("method %d %s: outcome %s, want NO_METHOD", (int)method, path,
                 outcome_name(r.outcome));
    assert_string_equal(r.allow, allow);
    assert_false(r.has_queue);
}

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

static void test_every_route_matches(void **state)
{
    assert_route(RD_HTTP_GET, "/healthz", ROUTE_HEALTHZ, NULL, 0);
    assert_route(RD_HTTP_GET, "/readyz", ROUTE_READYZ, NULL, 0);
    assert_route(RD_HTTP_POST, "/queues/emails/messages", ROUTE_ENQUEUE, "emails", 0);
    assert_route(RD_HTTP_GET, "/queues/emails/messages", ROUTE_LIST, "emails", 0);
    assert_route(RD_HTTP_GET, "/queues/emails/messages/42", ROUTE_GET, "emails", 42);
    assert_route(RD_HTTP_POST, "/queues/emails/claim", ROUTE_CLAIM, "emails", 0);
    assert_route(RD_HTTP_POST, "/queues/emails/messages/7/succeed", ROUTE_SUCCEED,
                 "emails", 7);
    assert_route(RD_HTTP_POST, "/queues/emails/messages/8/fail", ROUTE_FAIL, "emails", 8);
    assert_route(RD_HTTP_POST, "/queues/emails/messages/9/replay", ROUTE_REPLAY, "emails",
                 9);
    assert_route(RD_HTTP_POST, "/queues/emails/messages/10/extend", ROUTE_EXTEND,
                 "emails", 10);
    assert_route(RD_HTTP_POST, "/queues/emails/messages/11/snooze", ROUTE_SNOOZE,
                 "emails", 11);
    assert_route(RD_HTTP_DELETE, "/queues/emails", ROUTE_DROP_QUEUE, "emails", 0);
    assert_no_method(RD_HTTP_GET, "/queues/emails", "DELETE");
}

static void test_head_matches_get_routes(void **state)
{
    assert_route(RD_HTTP_HEAD, "/healthz", ROUTE_HEALTHZ, NULL, 0);
    assert_route(RD_HTTP_HEAD, "/readyz", ROUTE_READYZ, NULL, 0);
    assert_route(RD_HTTP_HEAD, "/queues/q/messages", ROUTE_LIST, "q", 0);
    assert_route(RD_HTTP_HEAD, "/queues/q/messages/3", ROUTE_GET, "q", 3);
    /* HEAD is not POST. */
    assert_no_method(RD_HTTP_HEAD, "/queues/q/claim", "POST");
    assert_no_method(RD_HTTP_HEAD, "/queues/q/messages/3/succeed", "POST");
}

static void test_ids(void **state)
{
    assert_route(RD_HTTP_GET, "/queues/q/messages/1", ROUTE_GET, "q", 1);
    assert_route(RD_HTTP_GET, "/queues/q/messages/10", ROUTE_GET, "q", 10);
    assert_route(RD_HTTP_GET, "/queues/q/messages/999999999999999", ROUTE_GET, "q",
                 999999999999999LL);
    assert_route(RD_HTTP_POST, "/queues/q/messages/123456789/fail", ROUTE_FAIL, "q",
                 123456789LL);
}

/* ---------------------------------------------------------------------------
 * 405: a known path with another method
 * ------------------------------------------------------------------------- */

static void test_wrong_method_allow_lists(void **state)
{
    assert_no_method(RD_HTTP_DELETE, "/queues/q/messages", "POST, GET");
    assert_no_method(RD_HTTP_PUT, "/queues/q/messages", "POST, GET");
    assert_no_method(RD_HTTP_PATCH, "/queues/q/messages", "POST, GET");
    assert_no_method(RD_HTTP_OPTIONS, "/queues/q/messages", "POST, GET");
    assert_no_method(RD_HTTP_OTHER, "/queues/q/messages", "POST, GET");
    assert_no_method(RD_HTTP_POST, "/healthz", "GET");
    assert_no_method(RD_HTTP_DELETE, "/readyz", "GET");
    assert_no_method(RD_HTTP_GET, "/queues/q/claim", "POST");
    assert_no_method(RD_HTTP_POST, "/queues/q/messages/1", "GET, DELETE");
    assert_no_method(RD_HTTP_PUT, "/queues/q/messages/1", "GET, DELETE");
    assert_no_method(RD_HTTP_GET, "/queues/q/messages/1/succeed", "POST");
    assert_no_method(RD_HTTP_GET, "/queues/q/messages/1/fail", "POST");
    assert_no_method(RD_HTTP_DELETE, "/queues/q/messages/1/replay", "POST");
    assert_no_method(RD_HTTP_PUT, "/queues/q/messages/1/extend", "POST");
}

/* The allow list is built fresh per call, not appended to a previous one. */
static void test_allow_list_not_reused(void **state)
{
    rd_route_match_t m;
    assert_int_equal(route_match(RD_HTTP_DELETE, "/queues/q/messages", 18, &m),
                     RD_ROUTE_NO_METHOD);
    assert_string_equal(m.allow, "POST, GET");
    assert_int_equal(route_match(RD_HTTP_DELETE, "/queues/q/messages", 18, &m),
                     RD_ROUTE_NO_METHOD);
    assert_string_equal(m.allow, "POST, GET");
    rd_route_match_free(&m);
}

/* ---------------------------------------------------------------------------
 * 404: unknown paths and bad ids
 * ------------------------------------------------------------------------- */

static void test_unknown_paths(void **state)
{
    const char *paths[] = {
        "", "/", "/queues/q/", "/queues/q/messages/1/unknown",
        "/queues/q/messages/1/succeed/", "/queues/q/messages/1/succeed/x", "/queues/q/claim/",
        "/queues/q/other", "/queue/q/messages", "/QUEUES/q/messages", "/healthz/",
        "/healthzz", "/health", "healthz", "//healthz", "/queues/q/messages/1/", "/readyz/x",
        "/queues/q/messages/x/y/z",
    };
    rd_http_method_t methods[] = { RD_HTTP_GET, RD_HTTP_POST, RD_HTTP_DELETE, RD_HTTP_HEAD };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++)
            assert_outcome(methods[k], paths[i], RD_ROUTE_NO_PATH);
    }
}

/* "/queues/q/messages/" has a trailing slash: it is neither the collection nor a
 * message, whatever the method. */
static void test_trailing_slash_is_no_path(void **state)
{
    assert_outcome(RD_HTTP_POST, "/queues/q/messages/", RD_ROUTE_NO_PATH);
    assert_outcome(RD_HTTP_GET, "/queues/q/messages/", RD_ROUTE_NO_PATH);
}

static void test_bad_ids(void **state)
{
    /* Only the canonical decimal form names a message: "001" and "007" are
     * not 1 and 7 (each id has one path, as Location gives it). */
    const char *ids[] = { "abc", "0", "00", "-1", "+1", "1a", "a1", "1.0", "1e3", " 1", "%31",
                          "001", "007", "01", "0010", "-0", "+0",
                          "1234567890123456", "99999999999999999999",
                          "9223372036854775808" };
    char path[128];
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        strcpy(path, "/queues/q/messages/");
        strcat(path, ids[i]);
        assert_outcome(RD_HTTP_GET, path, RD_ROUTE_BAD_ID);
        assert_outcome(RD_HTTP_HEAD, path, RD_ROUTE_BAD_ID);
        strcat(path, "/succeed");
        assert_outcome(RD_HTTP_POST, path, RD_ROUTE_BAD_ID);
    }
    assert_outcome(RD_HTTP_POST, "/queues/q/messages/0/fail", RD_ROUTE_BAD_ID);
    assert_outcome(RD_HTTP_POST, "/queues/q/messages/-5/replay", RD_ROUTE_BAD_ID);
    assert_outcome(RD_HTTP_POST, "/queues/q/messages/x/extend", RD_ROUTE_BAD_ID);
    assert_outcome(RD_HTTP_POST, "/queues/q/messages//extend", RD_ROUTE_NO_PATH);
}

/* ---------------------------------------------------------------------------
 * The queue segment
 * ------------------------------------------------------------------------- */

static void test_queue_percent_decoded(void **state)
{
    assert_route(RD_HTTP_POST, "/queues/a%2Fb/messages", ROUTE_ENQUEUE, "a/b", 0);
    assert_route(RD_HTTP_POST, "/queues/%2F/messages", ROUTE_ENQUEUE, "/", 0);
    assert_route(RD_HTTP_GET, "/queues/caf%C3%A9/messages/5", ROUTE_GET, "caf\xC3\xA9", 5);
    assert_route(RD_HTTP_GET, "/queues/caf%c3%a9/messages", ROUTE_LIST, "caf\xC3\xA9", 0);
    assert_route(RD_HTTP_POST, "/queues/with%20space/claim", ROUTE_CLAIM, "with space", 0);
    /* '+' is literal in a path. */
    assert_route(RD_HTTP_POST, "/queues/a+b/claim", ROUTE_CLAIM, "a+b", 0);
    assert_route(RD_HTTP_POST, "/queues/%7Bq%7D%3A%25/claim", ROUTE_CLAIM, "{q}:%", 0);
    assert_route(RD_HTTP_POST, "/queues/caf\xC3\xA9/messages/1/fail", ROUTE_FAIL,
                 "caf\xC3\xA9", 1);
}

static void test_queue_with_nul_keeps_length(void **state)
{
    rd_route_match_t m;
    const char *path = "/queues/a%00b/messages";
    assert_int_equal(route_match(RD_HTTP_GET, path, strlen(path), &m), RD_ROUTE_MATCHED);
    bool ok = m.queue_decoded && m.queue_len == 3 && memcmp(m.queue, "a\0b", 3) == 0;
    rd_route_match_free(&m);
    assert_true(ok);
}

static void test_queue_broken_escape(void **state)
{
    const char *paths[] = { "/queues/%G1/messages", "/queues/%4/messages", "/queues/a%/messages",
                            "/queues/%/messages", "/queues/%%41/messages",
                            "/queues/x%zz/messages" };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        result_t r = match(RD_HTTP_GET, paths[i]);
        if (r.outcome != RD_ROUTE_MATCHED)
            fail_msg("%s: outcome %s", paths[i], outcome_name(r.outcome));
        assert_string_equal(r.route, ROUTE_LIST);
        assert_false(r.queue_decoded);
        assert_int_equal(r.queue_len, 0);
    }
    result_t r = match(RD_HTTP_POST, "/queues/%4/messages/12/fail");
    assert_int_equal(r.outcome, RD_ROUTE_MATCHED);
    assert_string_equal(r.route, ROUTE_FAIL);
    assert_false(r.queue_decoded);
    assert_int_equal(r.id, 12);
}

/* The path length is honoured: bytes past len are not part of the path. */
static void test_path_length_honoured(void **state)
{
    rd_route_match_t m;
    const char *path = "/queues/q/messages/42/succeed";
    assert_int_equal(route_match(RD_HTTP_GET, path, strlen("/queues/q/messages/42"), &m),
                     RD_ROUTE_MATCHED);
    char route[96];
    snprintf(route, sizeof route, "%s", route_name(m.route));
    long long id = m.id;
    rd_route_match_free(&m);
    assert_string_equal(route, ROUTE_GET);
    assert_int_equal(id, 42);
    assert_int_equal(route_match(RD_HTTP_GET, "/healthzXYZ", 8, &m), RD_ROUTE_MATCHED);
    assert_string_equal(route_name(m.route), ROUTE_HEALTHZ);
    rd_route_match_free(&m);
}

/* The console's files: a prefix row, "/ui" itself and everything under "/ui/". */
static void test_ui_prefix(void **state)
{
    assert_route(RD_HTTP_GET, "/ui", ROUTE_UI, NULL, 0);
    assert_route(RD_HTTP_GET, "/ui/", ROUTE_UI, NULL, 0);
    assert_route(RD_HTTP_HEAD, "/ui/app.js", ROUTE_UI, NULL, 0);
    assert_route(RD_HTTP_GET, "/ui/a/b/c", ROUTE_UI, NULL, 0);
    assert_no_method(RD_HTTP_POST, "/ui", "GET");
    assert_no_method(RD_HTTP_DELETE, "/ui/app.js", "GET");
    assert_outcome(RD_HTTP_GET, "/uix", RD_ROUTE_NO_PATH);
    assert_outcome(RD_HTTP_GET, "/u", RD_ROUTE_NO_PATH);
}

/* Every row has a handler; the public ones are exactly /healthz, the OpenAPI
 * document and the console. */
static void test_table_rows(void **state)
{
    size_t public_rows = 0;
    for (size_t i = 0; i < rd_api_route_count; i++) {
        assert_non_null(rd_api_routes[i].handler);
        assert_non_null(rd_api_routes[i].pattern);
        if (rd_api_routes[i].flags & RD_ROUTE_PUBLIC) {
            const char *name = route_name(&rd_api_routes[i]);
            assert_true(strcmp(name, ROUTE_HEALTHZ) == 0 || strcmp(name, ROUTE_OPENAPI) == 0 ||
                        strcmp(name, ROUTE_UI) == 0);
            public_rows++;
        }
    }
    assert_int_equal(public_rows, 3);
}

static void test_match_free_is_idempotent(void **state)
{
    rd_route_match_t m;
    assert_int_equal(route_match(RD_HTTP_GET, "/queues/q/messages", 18, &m),
                     RD_ROUTE_MATCHED);
    assert_non_null(m.queue);
    rd_route_match_free(&m);
    assert_null(m.queue);
    rd_route_match_free(&m);
}

/* ---------------------------------------------------------------------------
 * rd_percent_decode
 * ------------------------------------------------------------------------- */

static void assert_decode(const char *in, bool plus_is_space, long want_len, const char *want)
{
    char out[128];
    memset(out, 'X', sizeof out);
    long n = rd_percent_decode(in, strlen(in), out, plus_is_space);
    assert_int_equal(n, want_len);
    if (want_len >= 0) {
        assert_memory_equal(out, want, (size_t)want_len);
        assert_int_equal(out[want_len], '\0');
    }
}

static void test_percent_decode(void **state)
{
    assert_decode("", false, 0, "");
    assert_decode("plain", false, 5, "plain");
    assert_decode("%2F", false, 1, "/");
    assert_decode("%2f", false, 1, "/");
    assert_decode("a%20b", false, 3, "a b");
    assert_decode("caf%C3%A9", false, 5, "caf\xC3\xA9");
    assert_decode("%00", false, 1, "\0");
    assert_decode("%25%32%35", false, 3, "%25");
    assert_decode("%41%42", false, 2, "AB");
    assert_decode("%ff", false, 1, "\xff");
}

static void test_percent_decode_plus(void **state)
{
    assert_decode("a+b", false, 3, "a+b");
    assert_decode("a+b", true, 3, "a b");
    assert_decode("++", true, 2, "  ");
    assert_decode("%2B", true, 1, "+");
    assert_decode("%2B+", true, 2, "+ ");
}

static void test_percent_decode_broken(void **state)
{
    assert_decode("%", false, -1, NULL);
    assert_decode("%4", false, -1, NULL);
    assert_decode("a%4", true, -1, NULL);
    assert_decode("%G1", false, -1, NULL);
    assert_decode("%1G", false, -1, NULL);
    assert_decode("%%", false, -1, NULL);
    assert_decode("ok%2", false, -1, NULL);
    assert_decode("%-1", false, -1, NULL);
}

/* len bounds the input: an escape cut by len is broken even if more follows. */
static void test_percent_decode_length_bound(void **state)
{
    char out[16];
    assert_int_equal(rd_percent_decode("a%41", 3, out, false), -1);
    assert_int_equal(rd_percent_decode("a%41", 4, out, false), 2);
    assert_string_equal(out, "aA");
    assert_int_equal(rd_percent_decode("abc", 2, out, false), 2);
    assert_string_equal(out, "ab");
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route_matches),
        cmocka_unit_test(test_head_matches_get_routes),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_wrong_method_allow_lists),
        cmocka_unit_test(test_allow_list_not_reused),
        cmocka_unit_test(test_unknown_paths),
        cmocka_unit_test(test_trailing_slash_is_no_path),
        cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_queue_percent_decoded),
        cmocka_unit_test(test_queue_with_nul_keeps_length),
        cmocka_unit_test(test_queue_broken_escape),
        cmocka_unit_test(test_path_length_honoured),
        cmocka_unit_test(test_ui_prefix),
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_match_free_is_idempotent),
        cmocka_unit_test(test_percent_decode),
        cmocka_unit_test(test_percent_decode_plus),
        cmocka_unit_test(test_percent_decode_broken),
        cmocka_unit_test(test_percent_decode_length_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
