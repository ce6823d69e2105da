/* test_e2e_groups.c - end-to-end tests of build/retryd over HTTP against a
 * real redis-server: fairness groups (docs/reference.md "Fairness groups"):
 * the group of a message on enqueue, GET, claim and settle; GET
 * /queues/{q}/groups and its paging; stats and /metrics; the policy's
 * group_max_in_flight, group_rate_limit and fifo_groups over HTTP.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_groups"
#include "e2e_common.h"

static const char *groups_path(const char *q, const char *query)
{
    return e2e_fmt("/queues/%s/groups%s%s", q, query ? "?" : "", query ? query : "");
}

static const char *policy_path(const char *q)
{
    return e2e_fmt("/queues/%s/policy", q);
}

/* A message's group shows on every answer that carries it: the enqueue's
 * echo, GET, a claim (byte for byte as GET), the settlement; null when it
 * has none. A bad group is a 422 on group and enqueues nothing. */
static void test_group_on_the_message(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gmsg");
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"a\",\"group\":\"t\\u00e9nant-1\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_string_equal(e2e_jstr(m, "group"), "t\xc3\xa9nant-1");
    long long grouped = e2e_jint(m, "id");
    long long plain = enqueue(q, "{\"payload\":\"b\",\"group\":null}");
    http(&r, "GET", message_path(q, grouped, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "group"), "t\xc3\xa9nant-1");
    http(&r, "GET", message_path(q, plain, NULL), NULL);
    e2e_jnull(e2e_expect_json(&r, 200), "group");

    /* Claimed (the oldest first: each is its group's only message), shown
     * as GET shows it, then settled. */
    for (int i = 0; i < 2; i++) {
        http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"worker\":\"w\"}");
        m = e2e_expect_json(&r, 200);
        expect_shown_as_get(q, m);
        long long id = e2e_jint(m, "id");
        http(&r, "POST", message_path(q, id, "succeed"), NULL);
        m = e2e_expect_json(&r, 200);
        if (id == grouped) assert_string_equal(e2e_jstr(m, "group"), "t\xc3\xa9nant-1");
        else e2e_jnull(m, "group");
    }

    static const char *const bad[] = { "\"\"", "7", "\"a\\u0000b\"", "\"a\\nb\"",
                                       "\"\\udc00\"" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x\",\"group\":%s}", bad[i]));
        e2e_expect_invalid_field(&r, "group");
    }
    char longest[200];
    memset(longest, 'g', 129);
    longest[129] = '\0';
    http(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x\",\"group\":\"%s\"}", longest));
    e2e_expect_invalid_field(&r, "group");
    longest[128] = '\0';
    http(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x\",\"group\":\"%s\"}", longest));
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 201), "group"), longest);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "totals"), "enqueued"), 3);
    e2e_response_free(&r);
}

/* A listing shows grouped messages as pending with their group, beside the
 * ungrouped ones (a grouped claimable id waits in its group's set, which
 * the listing walks as its own section). */
static void test_grouped_messages_are_listed(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "glist");
    long long grouped = enqueue(q, "{\"payload\":\"a\",\"group\":\"g\"}");
    long long plain = enqueue(q, "{\"payload\":\"b\"}");
    e2e_response_t r = { 0 };
    static const char *const queries[] = { "", "?status=pending" };
    for (size_t i = 0; i < 2; i++) {
        http(&r, "GET", e2e_fmt("%s%s", messages_path(q), queries[i]), NULL);
        rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
        assert_int_equal(rd_json_array_size(list), 2);
        for (size_t j = 0; j < 2; j++) {
            rd_json_t *m = rd_json_array_at(list, j);
            assert_string_equal(e2e_jstr(m, "status"), "pending");
            if (e2e_jint(m, "id") == grouped) assert_string_equal(e2e_jstr(m, "group"), "g");
            else if (e2e_jint(m, "id") == plain) e2e_jnull(m, "group");
            else fail_msg("listed an id %lld never enqueued", e2e_jint(m, "id"));
        }
    }
    e2e_response_free(&r);
}

/* A claim takes turns between groups: a batch of 3 over a backlog of 5 in
 * one group and 1 in each of two others takes one of each. */
static void test_claim_takes_turns(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gturn");
    for (int i = 0; i < 5; i++) enqueue(q, "{\"payload\":\"big\",\"group\":\"big\"}");
    enqueue(q, "{\"payload\":\"s1\",\"group\":\"small-1\"}");
    enqueue(q, "{\"payload\":\"s2\",\"group\":\"small-2\"}");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":3}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 3);
    int big = 0, s1 = 0, s2 = 0;
    for (size_t i = 0; i < 3; i++) {
        const char *g = e2e_jstr(rd_json_array_at(list, i), "group");
        big += strcmp(g, "big") == 0;
        s1 += strcmp(g, "small-1") == 0;
        s2 += strcmp(g, "small-2") == 0;
    }
    assert_int_equal(big, 1);
    assert_int_equal(s1, 1);
    assert_int_equal(s2, 1);
    e2e_response_free(&r);
}

/* GET /queues/{q}/groups over 250 groups, 100 a page: every group exactly
 * once, in name order, with its counts; the last page has next_cursor null.
 * stats show the number; a bad limit or cursor is a 422 on that field. */
static void test_groups_paging(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gpage");
    enum { N = 250 };
    for (int i = 0; i < N; i++)
        enqueue(q, e2e_fmt("{\"payload\":\"x\",\"group\":\"g%03d\"}", i));
    enqueue(q, "{\"payload\":\"second\",\"group\":\"g007\"}");
    enqueue(q, "{\"payload\":\"none\"}");   /* ungrouped: not a group of the page */
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":1}");
    rd_json_t *claimed = rd_json_array_at(e2e_jget(e2e_expect_json(&r, 200), "messages"), 0);
    char claimed_group[16];
    SET(claimed_group, e2e_jstr(claimed, "group"));

    bool seen[N] = { false };
    int pages = 0, total = 0;
    char cursor[512] = "";
    for (;;) {
        http(&r, "GET", groups_path(q, cursor[0] ? e2e_fmt("limit=100&cursor=%s", cursor)
                                                 : "limit=100"), NULL);
        rd_json_t *page = e2e_expect_json(&r, 200);
        rd_json_t *groups = e2e_jget(page, "groups");
        size_t n = rd_json_array_size(groups);
        pages++;
        for (size_t i = 0; i < n; i++) {
            rd_json_t *g = rd_json_array_at(groups, i);
            const char *name = e2e_jstr(g, "group");
            int k = atoi(name + 1);
            assert_true(k >= 0 && k < N);
            if (seen[k]) fail_msg("group %s shown twice", name);
            seen[k] = true;
            assert_int_equal(k, total);   /* name order */
            total++;
            bool is_claimed = strcmp(name, claimed_group) == 0;
            assert_int_equal(e2e_jint(g, "processing"), is_claimed ? 1 : 0);
            assert_int_equal(e2e_jint(g, "pending"),
                             (k == 7 ? 2 : 1) - (is_claimed ? 1 : 0));
        }
        rd_json_t *next = e2e_jget(page, "next_cursor");
        if (rd_json_is_null(next)) break;
        assert_int_equal(n, 100);
        SET(cursor, rd_json_string(next));
        if (pages > 3) fail_msg("more than 3 pages of 100 for %d groups", N);
    }
    assert_int_equal(total, N);
    assert_int_equal(pages, 3);

    http(&r, "GET", groups_path(q, NULL), NULL);   /* 100 by default */
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "groups")), 100);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "groups"), N);

    static const char *const bad_limits[] = { "limit=0", "limit=1001", "limit=ten" };
    for (size_t i = 0; i < 3; i++) {
        http(&r, "GET", groups_path(q, bad_limits[i]), NULL);
        e2e_expect_invalid_field(&r, "limit");
    }
    static const char *const bad_cursors[] = { "cursor=g001", "cursor=abc", "cursor=%ZZ" };
    for (size_t i = 0; i < 3; i++) {
        http(&r, "GET", groups_path(q, bad_cursors[i]), NULL);
        e2e_expect_invalid_field(&r, "cursor");
    }
    /* A queue without groups: an empty page. */
    char empty[64];
    e2e_queue_name(empty, sizeof empty, "gnone");
    enqueue(empty, "{\"payload\":\"x\"}");
    http(&r, "GET", groups_path(empty, NULL), NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(page, "groups")), 0);
    e2e_jnull(page, "next_cursor");
    http(&r, "GET", e2e_fmt("/queues/%s/stats", empty), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "groups"), 0);
    e2e_response_free(&r);
}

/* The three policy fields over HTTP: GET's defaults, PUT, PATCH (a field
 * given changes alone, null puts it back), the stored hash fields, 422s. */
static void test_group_policy_over_http(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gpolicy");
    e2e_response_t r = { 0 };
    http(&r, "GET", policy_path(q), NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "group_max_in_flight"), 0);
    e2e_jnull(p, "group_rate_limit");
    assert_false(rd_json_bool(e2e_jget(p, "fifo_groups")));

    http(&r, "PUT", policy_path(q),
         "{\"group_max_in_flight\":2,\"group_rate_limit\":{\"per_second\":1.5,\"burst\":3},"
         "\"fifo_groups\":true,\"max_in_flight\":9}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "group_max_in_flight"), 2);
    assert_true(rd_json_bool(e2e_jget(p, "fifo_groups")));
    assert_int_equal(e2e_jint(e2e_jget(p, "group_rate_limit"), "burst"), 3);
    redisReply *h = e2e_rcmd(g_redis, "HGET %s:{%s}:policy group_rate_limit.per_second",
                             g_prefix, q);
    assert_string_equal(h->str, "1.5");
    freeReplyObject(h);
    h = e2e_rcmd(g_redis, "HGET %s:{%s}:policy fifo_groups", g_prefix, q);
    assert_string_equal(h->str, "true");
    freeReplyObject(h);

    /* PATCH: fifo off, the rest kept. */
    http(&r, "PATCH", policy_path(q), "{\"fifo_groups\":false}");
    p = e2e_expect_json(&r, 200);
    assert_false(rd_json_bool(e2e_jget(p, "fifo_groups")));
    assert_int_equal(e2e_jint(p, "group_max_in_flight"), 2);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 9);
    /* PATCH null: back to the defaults, the fields gone from the hash. */
    http(&r, "PATCH", policy_path(q), "{\"group_rate_limit\":null,\"group_max_in_flight\":null}");
    p = e2e_expect_json(&r, 200);
    e2e_jnull(p, "group_rate_limit");
    assert_int_equal(e2e_jint(p, "group_max_in_flight"), 0);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 9);
    h = e2e_rcmd(g_redis, "HEXISTS %s:{%s}:policy group_rate_limit.burst", g_prefix, q);
    assert_int_equal(h->integer, 0);
    freeReplyObject(h);
    http(&r, "GET", policy_path(q), NULL);
    p = e2e_expect_json(&r, 200);
    e2e_jnull(p, "group_rate_limit");
    assert_false(rd_json_bool(e2e_jget(p, "fifo_groups")));
    /* PUT without them: the defaults again. */
    http(&r, "PATCH", policy_path(q), "{\"fifo_groups\":true}");
    e2e_expect_json(&r, 200);
    http(&r, "PUT", policy_path(q), "{}");
    assert_false(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "fifo_groups")));

    static const char *const bad[][2] = {
        { "{\"group_max_in_flight\":-1}", "group_max_in_flight" },
        { "{\"group_rate_limit\":{\"per_second\":0,\"burst\":1}}", "group_rate_limit.per_second" },
        { "{\"group_rate_limit\":{\"per_second\":1}}", "group_rate_limit.burst" },
        { "{\"group_rate_limit\":[]}", "group_rate_limit" },
        { "{\"fifo_groups\":\"yes\"}", "fifo_groups" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "PUT", policy_path(q), bad[i][0]);
        e2e_expect_invalid_field(&r, bad[i][1]);
        http(&r, "PATCH", policy_path(q), bad[i][0]);
        e2e_expect_invalid_field(&r, bad[i][1]);
    }
    e2e_response_free(&r);
}

/* group_max_in_flight holds a group back (counted held_group_cap in stats
 * and /metrics); /metrics has the queue's number of groups. */
static void test_group_cap_counted_and_metrics(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gcap");
    e2e_response_t r = { 0 };
    http(&r, "PUT", policy_path(q), "{\"group_max_in_flight\":1}");
    e2e_expect_json(&r, 200);
    enqueue(q, "{\"payload\":\"a1\",\"group\":\"a\"}");
    enqueue(q, "{\"payload\":\"a2\",\"group\":\"a\"}");
    enqueue(q, "{\"payload\":\"b1\",\"group\":\"b\"}");
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":3}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);   /* a1 and b1; a2 waits for a1 */
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    e2e_expect_no_content(&r);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(st, "groups"), 2);
    rd_json_t *totals = e2e_jget(st, "totals");
    assert_true(e2e_jint(totals, "held_group_cap") >= 1);
    assert_int_equal(e2e_jint(totals, "held_group_rate"), 0);

    metrics_with(&r, e2e_fmt("retryd_queue_groups{queue=\"%s\"} 2\n", q));
    assert_non_null(strstr(r.body, "# TYPE retryd_held_group_cap_total counter\n"));
    assert_non_null(strstr(r.body, e2e_fmt("retryd_held_group_rate_total{queue=\"%s\"} 0\n", q)));
    assert_non_null(strstr(r.body, "retryd_held_group_cap_total{queue=\""));
    e2e_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_group_on_the_message),
        T(test_grouped_messages_are_listed),
        T(test_claim_takes_turns),
        T(test_groups_paging),
        T(test_group_policy_over_http),
        T(test_group_cap_counted_and_metrics),
    };
    int failed = cmocka_run_group_tests_name("e2e_groups", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
