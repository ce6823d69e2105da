/* test_request_groups.c - unit tests for what fairness groups add to request
 * parsing and to the policy (docs/reference.md "Fairness groups"): an
 * enqueue's group, GET /queues/{q}/groups' query and its hex cursor, and
 * the policy fields group_max_in_flight, group_rate_limit and fifo_groups
 * (PUT, PATCH's nulls, the stored pairs and the JSON). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "retryd/buf.h"
#include "retryd/hex.h"
#include "retryd/jsonw.h"
#include "retryd/policy.h"
#include "retryd/request.h"

/* The single error in errs is (field, code). */
static void assert_one_error(const rd_field_errors_t *errs, const char *field, const char *code)
{
    if (errs->count != 1)
        fail_msg("want 1 error (%s/%s), got %zu (first: %s)", field, code, errs->count,
                 errs->count ? errs->items[0].field : "-");
    assert_string_equal(errs->items[0].field, field);
    assert_string_equal(errs->items[0].code, code);
    assert_true(strlen(errs->items[0].message) > 0);
}

/* {"payload":"p","group":<json>} parsed; the group's bytes into *group. */
static rd_req_result_t enqueue_with(const char *group_json, rd_enqueue_req_t *req,
                                    rd_field_errors_t *errs)
{
    static char body[1024];
    snprintf(body, sizeof body, "{\"payload\":\"p\",\"group\":%s}", group_json);
    return rd_request_enqueue(body, strlen(body), req, errs);
}

static void assert_group_refused(const char *group_json, const char *why)
{
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = enqueue_with(group_json, &req, &errs);
    rd_request_free(req.doc);
    if (r != RD_REQ_INVALID) fail_msg("group %s: result %d, want INVALID", group_json, (int)r);
    assert_one_error(&errs, "group", "invalid");
    assert_string_equal(errs.items[0].message, why);
}

static void test_enqueue_group_valid(void **state)
{
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(enqueue_with("\"tenant-7\"", &req, &errs), RD_REQ_OK);
    assert_string_equal(req.group, "tenant-7");
    assert_int_equal(req.group_len, 8);
    rd_request_free(req.doc);
    /* Any UTF-8 text: "é" and "日本" (5 bytes) as escapes and as they are. */
    assert_int_equal(enqueue_with("\"\\u00e9\\u65e5\\u672c\"", &req, &errs), RD_REQ_OK);
    assert_int_equal(req.group_len, 8);
    assert_memory_equal(req.group, "\xc3\xa9\xe6\x97\xa5\xe6\x9c\xac", 8);
    rd_request_free(req.doc);
    /* Absent or null: none. */
    const char *none[] = { "{\"payload\":\"p\"}", "{\"payload\":\"p\",\"group\":null}" };
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(rd_request_enqueue(none[i], strlen(none[i]), &req, &errs), RD_REQ_OK);
        assert_null(req.group);
        assert_int_equal(req.group_len, 0);
        rd_request_free(req.doc);
    }
    assert_int_equal(errs.count, 0);
}

static void test_enqueue_group_length(void **state)
{
    char json[300];
    /* 128 bytes: the most. */
    json[0] = '"';
    memset(json + 1, 'g', 128);
    snprintf(json + 129, sizeof json - 129, "\"");
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(enqueue_with(json, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.group_len, 128);
    rd_request_free(req.doc);
    /* 129 bytes, and 129 bytes in 2-byte characters (64 x "é" + "g"). */
    memset(json + 1, 'g', 129);
    snprintf(json + 130, sizeof json - 130, "\"");
    assert_group_refused(json, "group must be a string of 1 to 128 bytes.");
    char *p = json + 1;
    for (int i = 0; i < 64; i++) p += sprintf(p, "\xc3\xa9");
    snprintf(p, sizeof json - (size_t)(p - json), "g\"");
    assert_group_refused(json, "group must be a string of 1 to 128 bytes.");
    assert_group_refused("\"\"", "group must be a string of 1 to 128 bytes.");
}

static void test_enqueue_group_not_text(void **state)
{
    static const char *const not_strings[] = { "7", "true", "{}", "[\"a\"]", "1.5" };
    for (size_t i = 0; i < sizeof not_strings / sizeof not_strings[0]; i++)
        assert_group_refused(not_strings[i], "group must be a string of 1 to 128 bytes.");
    /* Invalid UTF-8: a stray continuation byte, a lone surrogate. */
    assert_group_refused("\"a\x80" "b\"", "group must be valid UTF-8.");
    assert_group_refused("\"\\ud800\"", "group must be valid UTF-8.");
    /* Control characters: U+0000 (cJSON would cut the string there), a tab,
     * DEL and a C1 control. */
    assert_group_refused("\"a\\u0000b\"", "group must not contain control characters.");
    assert_group_refused("\"a\\tb\"", "group must not contain control characters.");
    assert_group_refused("\"a\\u007fb\"", "group must not contain control characters.");
    assert_group_refused("\"a\\u0085b\"", "group must not contain control characters.");
}

/* A bad group is one error among the others, never in their place. */
static void test_enqueue_group_beside_other_errors(void **state)
{
    const char *body = "{\"payload\":1,\"group\":\"\",\"priority\":10}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_INVALID);
    assert_null(req.doc);
    assert_int_equal(errs.count, 3);
    bool seen = false;
    for (size_t i = 0; i < errs.count; i++) seen = seen || strcmp(errs.items[i].field, "group") == 0;
    assert_true(seen);
}

/* ---------------------------------------------------------------- GET /queues/{q}/groups */

static void test_hex_round_trip(void **state)
{
    const char name[] = "t\xc3\xa9nant \"7\"/&=";
    rd_buf_t hex = RD_BUF_INIT;
    rd_hex_encode(name, sizeof name - 1, &hex);
    assert_int_equal(hex.len, 2 * (sizeof name - 1));
    assert_string_equal(hex.data, "74c3a96e616e74202237222f263d");
    char back[64];
    assert_int_equal(rd_hex_decode(hex.data, hex.len, back, sizeof back), (long)sizeof name - 1);
    assert_memory_equal(back, name, sizeof name - 1);
    assert_int_equal(rd_hex_decode("4A4b", 4, back, sizeof back), 2);
    assert_memory_equal(back, "JK", 2);
    assert_int_equal(rd_hex_decode("abc", 3, back, sizeof back), -1);   /* odd */
    assert_int_equal(rd_hex_decode("zz", 2, back, sizeof back), -1);    /* no hex digit */
    assert_int_equal(rd_hex_decode("616263", 6, back, 2), -1);          /* does not fit */
    rd_buf_free(&hex);
}

static void test_groups_query(void **state)
{
    rd_groups_req_t g;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_groups(NULL, 0, &g, &errs), RD_REQ_OK);
    assert_int_equal(g.limit, 100);
    assert_int_equal(g.cursor_len, 0);
    const char *q = "limit=1000&cursor=74656e616e742d37";
    assert_int_equal(rd_request_groups(q, strlen(q), &g, &errs), RD_REQ_OK);
    assert_int_equal(g.limit, 1000);
    assert_int_equal(g.cursor_len, 8);
    assert_memory_equal(g.cursor, "tenant-7", 8);
    q = "cursor=";   /* an empty cursor is the first page */
    assert_int_equal(rd_request_groups(q, strlen(q), &g, &errs), RD_REQ_OK);
    assert_int_equal(g.cursor_len, 0);
    /* 128 bytes, the longest name, as a cursor. */
    char longest[300] = "cursor=";
    for (int i = 0; i < 128; i++) strcat(longest, "67");
    assert_int_equal(rd_request_groups(longest, strlen(longest), &g, &errs), RD_REQ_OK);
    assert_int_equal(g.cursor_len, 128);
    assert_int_equal(errs.count, 0);
}

static void test_groups_query_invalid(void **state)
{
    static const char *const limits[] = { "limit=0", "limit=1001", "limit=x", "limit=", "limit=-1" };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        rd_groups_req_t g;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_groups(limits[i], strlen(limits[i]), &g, &errs), RD_REQ_INVALID);
        assert_one_error(&errs, "limit", "invalid");
    }
    char too_long[300] = "cursor=";
    /* One byte more than the cursor holds (a group name after a sharded
     * queue's "s<k>."). */
    for (size_t i = 0; i < sizeof ((rd_groups_req_t *)0)->cursor + 1; i++) strcat(too_long, "67");
    const char *cursors[] = { "cursor=abc", "cursor=tenant", "cursor=%zz", "cursor=6%00", too_long };
    for (size_t i = 0; i < sizeof cursors / sizeof cursors[0]; i++) {
        rd_groups_req_t g;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_groups(cursors[i], strlen(cursors[i]), &g, &errs),
                         RD_REQ_INVALID);
        assert_one_error(&errs, "cursor", "invalid");
        assert_int_equal(g.cursor_len, 0);
    }
}

/* ---------------------------------------------------------------- the policy's fields */

static void policy_ok(const char *body, rd_policy_t *p)
{
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_policy(body, strlen(body), p, &errs);
    if (r != RD_REQ_OK) fail_msg("%s: result %d (%s)", body, (int)r,
                                 errs.count ? errs.items[0].field : "-");
}

/* The pairs policy_set would get for p, as a "name=value;" string. */
static const char *pairs_of(const rd_policy_t *p)
{
    static char text[1024];
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    size_t n = rd_policy_args(p, args, values);
    text[0] = '\0';
    for (size_t i = 0; i + 1 < n; i += 2) {
        strcat(text, args[i]);
        strcat(text, "=");
        strcat(text, args[i + 1]);
        strcat(text, ";");
    }
    return text;
}

/* The policy JSON of p, into a static buffer. */
static const char *json_of(const rd_policy_t *p)
{
    static char text[4096];
    rd_buf_t b = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &b);
    rd_policy_defaults_t d = { 30000, 0, 0 };
    rd_policy_write_json(&w, p, &d, "q", 1);
    snprintf(text, sizeof text, "%s", b.data);
    rd_buf_free(&b);
    return text;
}

static void test_policy_group_fields(void **state)
{
    rd_policy_t p;
    policy_ok("{\"group_max_in_flight\":3,\"group_rate_limit\":{\"per_second\":0.5,\"burst\":4},"
              "\"fifo_groups\":true}", &p);
    assert_int_equal(p.group_max_in_flight, 3);
    assert_true(p.group_per_second == 0.5);
    assert_int_equal(p.group_burst, 4);
    assert_int_equal(p.fifo_groups, 1);
    assert_string_equal(pairs_of(&p), "group_max_in_flight=3;group_rate_limit.per_second=0.5;"
                                      "group_rate_limit.burst=4;fifo_groups=true;");
    /* Stored and read back: the same policy. */
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    size_t n = rd_policy_args(&p, args, values);
    rd_str_t pairs[RD_POLICY_ARGS_MAX];
    for (size_t i = 0; i < n; i++) pairs[i] = (rd_str_t){ args[i], strlen(args[i]) };
    rd_policy_t back;
    assert_true(rd_policy_from_pairs(&back, pairs, n));
    assert_memory_equal(&back, &p, sizeof p);
    assert_non_null(strstr(json_of(&back), ",\"group_max_in_flight\":3,\"group_rate_limit\":"
                                           "{\"per_second\":0.5,\"burst\":4},\"fifo_groups\":true,"));
    rd_policy_free(&p);
    /* The edges: 0 (no cap) and 1000000, fifo false, the rate's bounds. */
    policy_ok("{\"group_max_in_flight\":0,\"fifo_groups\":false,"
              "\"group_rate_limit\":{\"per_second\":100000,\"burst\":100000}}", &p);
    assert_string_equal(pairs_of(&p), "group_max_in_flight=0;group_rate_limit.per_second=100000;"
                                      "group_rate_limit.burst=100000;fifo_groups=false;");
    policy_ok("{\"group_max_in_flight\":1000000,"
              "\"group_rate_limit\":{\"per_second\":0.001,\"burst\":1}}", &p);
    assert_int_equal(p.group_max_in_flight, 1000000);
    assert_true(p.group_per_second == 0.001);
    assert_int_equal(p.fifo_groups, -1);
}

/* Not given: none of the three is sent, and GET shows the defaults. */
static void test_policy_group_defaults(void **state)
{
    rd_policy_t p;
    policy_ok("{\"max_in_flight\":2}", &p);
    assert_string_equal(pairs_of(&p), "max_in_flight=2;");
    assert_non_null(strstr(json_of(&p), ",\"group_max_in_flight\":0,\"group_rate_limit\":null,"
                                        "\"fifo_groups\":false,"));
    rd_policy_t none;
    rd_policy_init(&none);
    assert_true(rd_policy_from_pairs(&none, NULL, 0));
    assert_non_null(strstr(json_of(&none), "\"fifo_groups\":false,"));
    /* A stored value no library writes is refused, not shown. */
    rd_str_t bad[] = { { "fifo_groups", 11 }, { "yes", 3 } };
    assert_false(rd_policy_from_pairs(&none, bad, 2));
}

/* Every field given at once: 16 pairs, all of them passed. */
static void test_policy_every_field_fits(void **state)
{
    rd_policy_t p;
    policy_ok("{\"max_retries\":4,\"backoff\":{\"base_seconds\":2,\"max_seconds\":90,"
              "\"jitter\":\"equal\"},\"lease_seconds\":45,\"dead_ttl\":\"7d\","
              "\"succeeded_ttl\":0,\"max_in_flight\":12,"
              "\"rate_limit\":{\"per_second\":0.5,\"burst\":2},\"message_ttl\":60,"
              "\"on_expiry\":\"delete\",\"group_max_in_flight\":1,"
              "\"group_rate_limit\":{\"per_second\":2,\"burst\":3},\"fifo_groups\":true}", &p);
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    assert_int_equal(rd_policy_args(&p, args, values), 32);
}

/* PATCH: null puts each back to its default (the caller sends "" for the
 * stored names, store.c), apart from every other field. */
static void test_policy_group_nulls(void **state)
{
    rd_policy_t p;
    policy_ok("{\"group_max_in_flight\":null,\"group_rate_limit\":null,\"fifo_groups\":null}", &p);
    assert_int_equal(p.nulls, RD_POLICY_NULL(group_max_in_flight) |
                              RD_POLICY_NULL(group_rate_limit) | RD_POLICY_NULL(fifo_groups));
    assert_string_equal(pairs_of(&p), "");
    policy_ok("{\"fifo_groups\":null,\"max_in_flight\":null}", &p);
    assert_int_equal(p.nulls, RD_POLICY_NULL(fifo_groups) | RD_POLICY_NULL(max_in_flight));
    /* A PATCH of fifo_groups false sends "false": it turns strict order off. */
    policy_ok("{\"fifo_groups\":false}", &p);
    assert_int_equal(p.nulls, 0);
    assert_string_equal(pairs_of(&p), "fifo_groups=false;");
}

static void test_policy_group_invalid(void **state)
{
    static const char *const cases[][3] = {
        { "{\"group_max_in_flight\":-1}", "group_max_in_flight", "invalid" },
        { "{\"group_max_in_flight\":1000001}", "group_max_in_flight", "invalid" },
        { "{\"group_max_in_flight\":1.5}", "group_max_in_flight", "invalid" },
        { "{\"group_max_in_flight\":\"3\"}", "group_max_in_flight", "invalid" },
        { "{\"group_rate_limit\":5}", "group_rate_limit", "invalid" },
        { "{\"group_rate_limit\":{\"burst\":1}}", "group_rate_limit.per_second", "required" },
        { "{\"group_rate_limit\":{\"per_second\":1}}", "group_rate_limit.burst", "required" },
        { "{\"group_rate_limit\":{\"per_second\":0.0001,\"burst\":1}}",
          "group_rate_limit.per_second", "invalid" },
        { "{\"group_rate_limit\":{\"per_second\":100001,\"burst\":1}}",
          "group_rate_limit.per_second", "invalid" },
        { "{\"group_rate_limit\":{\"per_second\":\"1\",\"burst\":1}}",
          "group_rate_limit.per_second", "invalid" },
        { "{\"group_rate_limit\":{\"per_second\":1,\"burst\":0}}", "group_rate_limit.burst",
          "invalid" },
        { "{\"group_rate_limit\":{\"per_second\":1,\"burst\":100001}}", "group_rate_limit.burst",
          "invalid" },
        { "{\"fifo_groups\":\"true\"}", "fifo_groups", "invalid" },
        { "{\"fifo_groups\":1}", "fifo_groups", "invalid" },
        { "{\"groups_fifo\":true}", "groups_fifo", "invalid" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_policy_t p;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_policy(cases[i][0], strlen(cases[i][0]), &p, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", cases[i][0], (int)r);
        assert_one_error(&errs, cases[i][1], cases[i][2]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_group_valid),
        cmocka_unit_test(test_enqueue_group_length),
        cmocka_unit_test(test_enqueue_group_not_text),
        cmocka_unit_test(test_enqueue_group_beside_other_errors),
        cmocka_unit_test(test_hex_round_trip),
        cmocka_unit_test(test_groups_query),
        cmocka_unit_test(test_groups_query_invalid),
        cmocka_unit_test(test_policy_group_fields),
        cmocka_unit_test(test_policy_group_defaults),
        cmocka_unit_test(test_policy_every_field_fits),
        cmocka_unit_test(test_policy_group_nulls),
        cmocka_unit_test(test_policy_group_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
