/* test_e2e_shards.c - end-to-end tests of build/retryd over HTTP against a
 * real redis-server: the APIs over every shard of a sharded queue
 * (docs/sharding.md "Every API over all shards"): listings of messages and
 * groups page across the shards, each message and group once.
 *
 * The group's daemon, setup, and the helpers the e2e suites share:
 * e2e_common.h and e2e_shards.h. */

#define E2E_SUITE "test_e2e_shards"
#include "e2e_common.h"
#include "retryd/shards.h"
#include "e2e_shards.h"

/* A queue of `shards` shards on the side daemon (started here), its raise
 * closed, so that every later enqueue is placed under the new count. */
static void sharded_queue(char *q, size_t cap, const char *tag, int shards)
{
    start_sharding_daemon();
    e2e_queue_name(q, cap, tag);
    e2e_response_t r = { 0 };
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), e2e_fmt("{\"shards\":%d}", shards));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), shards);
    close_raise(q);
    e2e_response_free(&r);
}

static void stop_side(void)
{
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Pages GET /queues/{q}/messages<query> from the daemon on port to the end:
 * the ids in order into ids (at most cap), *pages the pages read; every
 * page's total is `total`. Returns the count. */
static size_t list_all(int port, const char *q, const char *query, int limit, long long total,
                       long long *ids, size_t cap, int *pages)
{
    char cursor[256] = "";
    size_t n = 0;
    *pages = 0;
    e2e_response_t r = { 0 };
    for (;;) {
        const char *path = e2e_fmt("/queues/%s/messages?limit=%d%s%s%s", q, limit, query,
                                   cursor[0] ? "&cursor=" : "",
                                   cursor[0] ? e2e_url_encode(cursor) : "");
        http_to(port, &r, "GET", path, NULL, 0);
        rd_json_t *page = e2e_expect_json(&r, 200);
        (*pages)++;
        assert_true(*pages < 200);
        assert_int_equal(e2e_jint(page, "total"), total);
        rd_json_t *ms = e2e_jget(page, "messages");
        assert_true(rd_json_array_size(ms) <= (size_t)limit);
        for (size_t i = 0; i < rd_json_array_size(ms); i++) {
            assert_true(n < cap);
            ids[n++] = e2e_jint(rd_json_array_at(ms, i), "id");
        }
        const rd_json_t *next = e2e_jget(page, "next_cursor");
        if (rd_json_is_null(next)) break;
        snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    }
    e2e_response_free(&r);
    return n;
}

/* Each of want[0..n) exactly once in got[0..n). */
static void expect_each_once(const long long *got, size_t ngot, const long long *want, size_t n)
{
    assert_int_equal(ngot, n);
    for (size_t i = 0; i < n; i++) {
        size_t seen = 0;
        for (size_t j = 0; j < ngot; j++) seen += got[j] == want[i];
        if (seen != 1) fail_msg("message %lld listed %zu times", want[i], seen);
    }
}

/* 30 messages over 3 shards (10 each), 4 of them leased: GET messages
 * pages through every shard, shard 0 first, each message exactly once, the
 * total summed over the shards on every page; a state filter too. The
 * daemon that has no view of the queue learns it from its first page and
 * answers the same. */
static void test_shards_listing_pages_every_shard(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "listed", 3);
    e2e_response_t r = { 0 };
    long long ids[30];
    for (int i = 0; i < 30; i++) {
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"m%d\"}", i));
        ids[i] = e2e_jint(e2e_expect_json(&r, 201), "id");
    }
    int on[3] = { 0 };
    for (int i = 0; i < 30; i++) on[ids[i] / RD_SHARD_SPAN]++;
    assert_int_equal(on[0], 10);
    assert_int_equal(on[1], 10);
    assert_int_equal(on[2], 10);
    long long leased[4];
    for (int i = 0; i < 4; i++) {
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":60}");
        leased[i] = e2e_jint(e2e_expect_json(&r, 200), "id");
    }

    long long got[64];
    int pages;
    size_t n = list_all(g_side.port, q, "", 7, 30, got, 64, &pages);
    expect_each_once(got, n, ids, 30);
    assert_true(pages >= 5);           /* 7 a page: never more, whatever the shards */
    for (size_t i = 1; i < n; i++)     /* shard by shard, shard 0 first */
        assert_true(got[i] / RD_SHARD_SPAN >= got[i - 1] / RD_SHARD_SPAN);

    n = list_all(g_side.port, q, "&status=processing", 3, 4, got, 64, &pages);
    expect_each_once(got, n, leased, 4);
    long long pending[26];
    size_t np = 0;
    for (int i = 0; i < 30; i++) {
        bool was_leased = false;
        for (int j = 0; j < 4; j++) was_leased |= ids[i] == leased[j];
        if (!was_leased) pending[np++] = ids[i];
    }
    n = list_all(g_side.port, q, "&status=pending", 1000, 26, got, 64, &pages);
    expect_each_once(got, n, pending, 26);
    assert_int_equal(pages, 3);        /* one a shard: a page reads one shard */

    /* The main daemon has no view: its first page learns it. */
    n = list_all(g_daemon.port, q, "", 1000, 30, got, 64, &pages);
    expect_each_once(got, n, ids, 30);
    e2e_response_free(&r);
    stop_side();
}

/* Cursors of a sharded queue: a bare cursor (one issued before the raise)
 * goes on in shard 0; one naming a shard the queue does not have (s5. of 3
 * shards: lowered meanwhile) is the end; one naming no shard at all is 400
 * with the field. Empty shards between cost no empty page: the page goes on
 * to the next shard at once. */
static void test_shards_listing_cursors(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "cursors");
    enqueue(q, "{\"payload\":\"before-1\"}");
    enqueue(q, "{\"payload\":\"before-2\"}");
    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("%s?limit=1", messages_path(q)), NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);
    char bare[128];
    snprintf(bare, sizeof bare, "%s", rd_json_string(e2e_jget(page, "next_cursor")));
    assert_true(bare[0] != 's');

    start_sharding_daemon();
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    side(&r, "POST", messages_path(q), "{\"payload\":\"after\",\"group\":\"tenant-42\"}");
    long long on_1 = e2e_jint(e2e_expect_json(&r, 201), "id");
    assert_int_equal(on_1 / RD_SHARD_SPAN, 1);

    /* The bare cursor: the rest of shard 0, then shard 1's message, then
     * shard 2's empty end (a page reads one shard). */
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=%s", messages_path(q), e2e_url_encode(bare)), NULL);
    page = e2e_expect_json(&r, 200);
    rd_json_t *ms = e2e_jget(page, "messages");
    assert_int_equal(rd_json_array_size(ms), 1);
    assert_string_equal(e2e_jstr(rd_json_array_at(ms, 0), "payload"), "before-2");
    assert_int_equal(e2e_jint(page, "total"), 3);
    const char *next = rd_json_string(e2e_jget(page, "next_cursor"));
    assert_string_equal(next, "s1.");
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=s1.", messages_path(q)), NULL);
    page = e2e_expect_json(&r, 200);
    ms = e2e_jget(page, "messages");
    assert_int_equal(rd_json_array_size(ms), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(ms, 0), "id"), on_1);
    assert_string_equal(rd_json_string(e2e_jget(page, "next_cursor")), "s2.");
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=s2.", messages_path(q)), NULL);
    page = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(page, "messages")), 0);
    assert_true(rd_json_is_null(e2e_jget(page, "next_cursor")));

    side(&r, "GET", e2e_fmt("%s?cursor=s5.", messages_path(q)), NULL);
    page = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(page, "messages")), 0);
    assert_int_equal(e2e_jint(page, "total"), 3);
    assert_true(rd_json_is_null(e2e_jget(page, "next_cursor")));

    side(&r, "GET", e2e_fmt("%s?cursor=s64.", messages_path(q)), NULL);
    rd_json_t *errors = expect_invalid(&r, messages_path(q), 1);
    expect_field_error(errors, "cursor", "invalid", NULL);
    e2e_response_free(&r);
    stop_side();
}

/* GET groups of a sharded queue: 12 groups spread by their hash over 3
 * shards, paged 5 at a time from either daemon: each group once, with its
 * counts. */
static void test_shards_groups_listing(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "grouped", 3);
    e2e_response_t r = { 0 };
    int shards_used[3] = { 0 };
    for (int g = 0; g < 12; g++)
        for (int i = 0; i <= g % 3; i++) {
            side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x\",\"group\":\"g%02d\"}", g));
            shards_used[e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN] = 1;
        }
    assert_int_equal(shards_used[0] + shards_used[1] + shards_used[2], 3);

    int ports[2] = { g_side.port, g_daemon.port };
    for (int p = 0; p < 2; p++) {
        int seen[12] = { 0 }, pages = 0;
        char cursor[256] = "";
        for (;;) {
            http_to(ports[p], &r, "GET",
                    e2e_fmt("/queues/%s/groups?limit=5%s%s", q, cursor[0] ? "&cursor=" : "",
                            cursor),
                    NULL, 0);
            rd_json_t *page = e2e_expect_json(&r, 200);
            assert_true(++pages < 20);
            rd_json_t *gs = e2e_jget(page, "groups");
            assert_true(rd_json_array_size(gs) <= 5);
            for (size_t i = 0; i < rd_json_array_size(gs); i++) {
                const rd_json_t *g = rd_json_array_at(gs, i);
                int k = atoi(e2e_jstr(g, "group") + 1);
                assert_true(k >= 0 && k < 12);
                seen[k]++;
                assert_int_equal(e2e_jint(g, "pending"), k % 3 + 1);
            }
            const rd_json_t *next = e2e_jget(page, "next_cursor");
            if (rd_json_is_null(next)) break;
            snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
        }
        for (int k = 0; k < 12; k++)
            if (seen[k] != 1) fail_msg("port %d: group g%02d listed %d times", ports[p], k, seen[k]);
    }
    e2e_response_free(&r);
    stop_side();
}

/* How many messages of q the listing of status totals (summed over shards). */
static long long listed_total(int port, const char *q, const char *status)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, "GET", e2e_fmt("/queues/%s/messages?limit=1&status=%s", q, status), NULL, 0);
    long long n = e2e_jint(e2e_expect_json(&r, 200), "total");
    e2e_response_free(&r);
    return n;
}

/* Enqueues n messages on the side daemon (round robin over the shards) and
 * kills each: n dead letters, ids into ids. */
static void dead_letters(const char *q, long long *ids, int n)
{
    e2e_response_t r = { 0 };
    for (int i = 0; i < n; i++) {
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"d%d\"}", i));
        ids[i] = e2e_jint(e2e_expect_json(&r, 201), "id");
        side(&r, "POST", message_path(q, ids[i], "kill"), "{\"reason\":\"test\"}");
        assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    }
    e2e_response_free(&r);
}

/* Replay over every shard: by ids given in any order across the shards
 * (each replayed on its own shard; an id of no letter counts nothing), then
 * all the rest. From the daemon without a view too: it reads the layout
 * before the first call. */
static void test_shards_replay_every_shard(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "replayed", 3);
    long long ids[12];
    dead_letters(q, ids, 12);
    int on[3] = { 0 };
    for (int i = 0; i < 12; i++) on[ids[i] / RD_SHARD_SPAN]++;
    assert_true(on[0] == 4 && on[1] == 4 && on[2] == 4);
    assert_int_equal(listed_total(g_side.port, q, "dead"), 12);

    /* Shard 2's first, then 0's, then 1's, and one id that names nothing. */
    long long pick[4] = { 0 };
    for (int i = 0; i < 12 && (!pick[0] || !pick[1] || !pick[2]); i++) {
        int k = (int)(ids[i] / RD_SHARD_SPAN);
        if (!pick[(k + 1) % 3]) pick[(k + 1) % 3] = ids[i];
    }
    pick[3] = 2 * RD_SHARD_SPAN + 999;
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q),
         e2e_fmt("{\"ids\":[%lld,%lld,%lld,%lld]}", pick[0], pick[1], pick[2], pick[3]));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 3);
    for (int i = 0; i < 3; i++) {
        http(&r, "GET", message_path(q, pick[i], NULL), NULL);
        assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "pending");
    }
    assert_int_equal(listed_total(g_daemon.port, q, "dead"), 9);

    side(&r, "POST", e2e_fmt("/queues/%s/replay", q), "{\"all\":true}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 9);
    assert_int_equal(listed_total(g_side.port, q, "dead"), 0);
    assert_int_equal(listed_total(g_side.port, q, "pending"), 12);
    e2e_response_free(&r);
    stop_side();
}

/* Redrive out of a sharded queue into another: by ids across the shards,
 * then all the rest; each letter lands in the target once, and leaves its
 * own shard of the source. */
static void test_shards_redrive_every_shard(void **state)
{
    (void)state;
    char q[64], to[64];
    sharded_queue(q, sizeof q, "redriven", 3);
    e2e_queue_name(to, sizeof to, "redrive-to");
    long long ids[9];
    dead_letters(q, ids, 9);
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q),
         e2e_fmt("{\"ids\":[%lld,%lld,%lld],\"to\":\"%s\"}", ids[8], ids[4], ids[0], to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 3);
    assert_int_equal(listed_total(g_side.port, q, "dead"), 6);
    assert_int_equal(listed_total(g_side.port, to, "pending"), 3);
    side(&r, "POST", e2e_fmt("/queues/%s/replay", q), e2e_fmt("{\"all\":true,\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 6);
    assert_int_equal(listed_total(g_side.port, q, "dead"), 0);
    assert_int_equal(listed_total(g_daemon.port, to, "pending"), 9);
    for (int k = 1; k < 3; k++) {
        redisReply *x = e2e_rcmd(g_redis, "ZCARD %s:{%s:%d.0}:3:redriving", g_prefix, q, k);
        assert_int_equal(x->integer, 0);
        freeReplyObject(x);
    }
    e2e_response_free(&r);
    stop_side();
}

/* The sum of series `name` of GET stats?series=minute of q, from port. */
static long long series_sum(int port, const char *q, const char *name)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, "GET", e2e_fmt("/queues/%s/stats?series=minute", q), NULL, 0);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    rd_json_t *a = e2e_jget(e2e_jget(doc, "series"), name);
    long long sum = 0;
    for (size_t i = 0; i < rd_json_array_size(a); i++) {
        double v = 0;
        assert_true(rd_json_number(rd_json_array_at(a, i), &v));
        sum += (long long)v;
    }
    e2e_response_free(&r);
    return sum;
}

/* The time series of a sharded queue sum every shard's rings, from the
 * daemon with a view and from the one without. */
static void test_shards_series_sum_every_shard(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "series", 3);
    long long ids[6];
    dead_letters(q, ids, 6);
    assert_int_equal(series_sum(g_side.port, q, "enqueued"), 6);
    assert_int_equal(series_sum(g_side.port, q, "dead"), 6);
    assert_int_equal(series_sum(g_daemon.port, q, "enqueued"), 6);
    stop_side();
}

/* max_in_flight and rate_limit are not held across shards yet: each shard
 * would hold the whole limit. So a queue has either shards above 1 or
 * these limits: 422 when one request asks for both, 409 when the stored
 * policy has the other; nothing changes either way. */
static void test_shards_refuse_limits_not_held_across_shards(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "limited");
    const char *policy = e2e_fmt("/queues/%s/policy", q);
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy, "{\"shards\":3,\"max_in_flight\":10}");
    rd_json_t *errors = expect_invalid(&r, policy, 1);
    expect_field_error(errors, "shards", "invalid", NULL);
    side(&r, "PUT", policy, "{\"max_in_flight\":5}");
    e2e_expect_json(&r, 200);
    side(&r, "PATCH", policy, "{\"shards\":3}");
    e2e_expect_problem(&r, 409, "invalid-state", policy);
    assert_non_null(strstr(r.body, "max_in_flight"));
    side(&r, "PUT", policy, "{\"shards\":3}");   /* a PUT's fields come after the count */
    e2e_expect_problem(&r, 409, "invalid-state", policy);
    side(&r, "GET", policy, NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 1);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 5);

    /* Without the limit the raise goes; then the limit is refused. */
    side(&r, "PATCH", policy, "{\"max_in_flight\":0}");
    e2e_expect_json(&r, 200);
    side(&r, "PATCH", policy, "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    side(&r, "PATCH", policy, "{\"rate_limit\":{\"per_second\":5,\"burst\":5}}");
    e2e_expect_problem(&r, 409, "invalid-state", policy);
    assert_non_null(strstr(r.body, "rate_limit"));
    side(&r, "PATCH", policy, "{\"max_in_flight\":4}");
    e2e_expect_problem(&r, 409, "invalid-state", policy);
    side(&r, "GET", policy, NULL);
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 3);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 0);
    e2e_jnull(p, "rate_limit");
    e2e_response_free(&r);
    stop_side();
}

/* A raise settles by itself (docs/sharding.md "When the raise settles"):
 * a group with messages on its old shard (a stray) keeps the raise
 * unsettled, its new messages join it there, so its order holds; once it
 * has drained, the timer's round closes the raise, and the group's next
 * message goes straight to its new shard. */
static void test_shards_raise_settles_when_strays_drain(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64], g[32];
    e2e_queue_name(q, sizeof q, "settles");
    group_leaving_shard_0(g, sizeof g, 1, 3);
    int home = rd_shards_pick(g, strlen(g), 3);
    e2e_response_t r = { 0 };
    for (int i = 0; i < 3; i++)
        enqueue(q, e2e_fmt("{\"payload\":\"old-%d\",\"group\":\"%s\"}", i, g));
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":3}");
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    redisReply *x = e2e_rcmd(g_redis, "SISMEMBER %s:{%s}:3:strays %s", g_prefix, q, g);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"old-3\",\"group\":\"%s\"}", g));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN, 0);

    /* The group drains in order, on shard 0. */
    for (int i = 0; i < 4; i++) {
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":30}");
        rd_json_t *m = e2e_expect_json(&r, 200);
        assert_string_equal(e2e_jstr(m, "payload"), e2e_fmt("old-%d", i));
        long long id = e2e_jint(m, "id");
        char token[128];
        snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));
        side(&r, "POST", message_path(q, id, "succeed"),
             e2e_fmt("{\"lease_token\":\"%s\"}", token));
        assert_int_equal(r.status, 200);
    }
    x = e2e_rcmd(g_redis, "EXISTS %s:{%s}:3:strays", g_prefix, q);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    close_raise(q);   /* the timer's round, within a second or two */
    side(&r, "GET", e2e_fmt("/queues/%s/policy", q), NULL);
    assert_false(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"new\",\"group\":\"%s\"}", g));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN, home);
    /* Settled: the next change is taken. */
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":4}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 4);
    e2e_response_free(&r);
    stop_side();
}

/* The change of shards waits for a rolling upgrade, that is a library of
 * another release (retryd_v<N>), not any library whose name starts with
 * "retryd": `make bench` loads retryd_bench, whose raise was refused. */
static void test_shards_change_ignores_other_libraries(void **state)
{
    (void)state;
    start_sharding_daemon();
    const char *code = "#!lua name=retryd_tools\n"
                       "redis.register_function('retryd_tools_noop', function() return 1 end)";
    redisReply *x = e2e_rcmd(g_redis, "FUNCTION LOAD REPLACE %s", code);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    freeReplyObject(x);
    char q[64];
    e2e_queue_name(q, sizeof q, "otherlib");
    e2e_response_t r = { 0 };
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":3}");
    int status = r.status;
    freeReplyObject(e2e_rcmd(g_redis, "FUNCTION DELETE retryd_tools"));
    if (status != 200) fail_msg("refused with retryd_tools loaded: %d %.*s", status,
                                (int)r.body_len, r.body);
    e2e_response_free(&r);
    stop_side();
}

/* Whether group g is present on q's shard k (in its 3:groups). */
static bool group_present(const char *q, int k, const char *g)
{
    redisReply *x = k == 0 ? e2e_rcmd(g_redis, "ZSCORE %s:{%s}:3:groups %s", g_prefix, q, g)
                           : e2e_rcmd(g_redis, "ZSCORE %s:{%s:%d.0}:3:groups %s", g_prefix, q,
                                      k, g);
    bool present = x->type == REDIS_REPLY_STRING;
    freeReplyObject(x);
    return present;
}

/* A group whose shard is `want` among n shards, "<tag>-<i>", into out. */
static void group_on(char *out, size_t cap, const char *tag, int n, int want)
{
    for (int i = 0;; i++) {
        snprintf(out, cap, "%s-%d", tag, i);
        if (rd_shards_pick(out, strlen(out), n) == want) return;
    }
}

/* Review of the settling: a grouped letter redriven into a sharded queue
 * (redrive_in keeps its group, lua/65_redrive.lua) is written to the
 * target's shard 0 whatever its group's shard, so the group is present on
 * two shards (docs/sharding.md section 2's invariant), and during a raise
 * on an old shard its walk has passed. */
static void test_shards_redrive_keeps_a_group_on_one_shard(void **state)
{
    (void)state;
    char to[64], src[64], g[32];
    sharded_queue(to, sizeof to, "rdgroup", 2);
    e2e_queue_name(src, sizeof src, "rdgroup-src");
    group_on(g, sizeof g, "rg", 2, 1);
    e2e_response_t r = { 0 };
    side(&r, "POST", messages_path(src), e2e_fmt("{\"payload\":\"first\",\"group\":\"%s\"}", g));
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    side(&r, "POST", message_path(src, id, "kill"), "{\"reason\":\"test\"}");
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    side(&r, "POST", e2e_fmt("/queues/%s/replay", src),
         e2e_fmt("{\"ids\":[%lld],\"to\":\"%s\"}", id, to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    side(&r, "POST", messages_path(to), e2e_fmt("{\"payload\":\"second\",\"group\":\"%s\"}", g));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN, 1);
    if (group_present(to, 0, g) && group_present(to, 1, g))
        fail_msg("group %s is present on shards 0 and 1 of %s", g, to);
    e2e_response_free(&r);
    stop_side();
}

/* Review of the settling: a dead grouped letter replayed during a raise is
 * replayed in place (lua/60_operator.lua replay_many), so its group is
 * present on its old shard again after that shard's walk, and not a stray:
 * once the other stray drains the raise closes with the group still there,
 * and its next message goes to its new shard (two shards, order lost). */
static void test_shards_replay_during_a_raise_keeps_it_unsettled(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64], g[32], hold[32];
    e2e_queue_name(q, sizeof q, "replaysettle");
    group_on(g, sizeof g, "rp", 2, 1);
    group_leaving_shard_0(hold, sizeof hold, 1, 2);
    e2e_response_t r = { 0 };
    side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"dead\",\"group\":\"%s\"}", g));
    long long dead = e2e_jint(e2e_expect_json(&r, 201), "id");
    side(&r, "POST", message_path(q, dead, "kill"), "{\"reason\":\"test\"}");
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"hold\",\"group\":\"%s\",\"delay_seconds\":3600}", hold));
    long long held = e2e_jint(e2e_expect_json(&r, 201), "id");
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":2}");
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    /* shard 0 has walked its groups (the raise's first round) */
    assert_string_equal(shard_hget(q, 0, "shard", "scanned"), shard_hget(q, 0, "shard", "rev"));
    side(&r, "POST", e2e_fmt("/queues/%s/replay", q), e2e_fmt("{\"ids\":[%lld]}", dead));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    side(&r, "DELETE", message_path(q, held, NULL), NULL);
    assert_int_equal(r.status, 204);
    e2e_pause_ms(2500);   /* the timer's rounds */
    bool settling = shard_hget(q, 0, "shard", "from")[0] != '\0';
    if (group_present(q, 0, g) && !settling)
        fail_msg("the raise closed while group %s is present on its old shard 0", g);
    side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"next\",\"group\":\"%s\"}", g));
    long long next = e2e_jint(e2e_expect_json(&r, 201), "id");
    if (group_present(q, 0, g) && next / RD_SHARD_SPAN != 0)
        fail_msg("group %s is on shard 0 and its next message went to shard %lld", g,
                 next / RD_SHARD_SPAN);
    e2e_response_free(&r);
    stop_side();
}

/* Review of the settling: a raise whose copy to an old shard was lost (a
 * daemon that died between shards_set raise and the copies, docs/
 * sharding.md section 7: "the caller (or the next round) copies the policy
 * from shard 0"). Every round's shard_scan of that shard answers "stale"
 * and src/shard_round.c only reads the view again: on an idle queue the
 * copy is never made and the raise never settles (every later change of
 * shards is a 409). */
static void test_shards_raise_with_a_lost_copy_settles(void **state)
{
    (void)state;
    char q[64], hold[32];
    sharded_queue(q, sizeof q, "lostcopy", 2);
    group_leaving_shard_0(hold, sizeof hold, 2, 3);
    e2e_response_t r = { 0 };
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"hold\",\"group\":\"%s\",\"delay_seconds\":3600}", hold));
    long long held = e2e_jint(e2e_expect_json(&r, 201), "id");
    assert_int_equal(held / RD_SHARD_SPAN, 0);
    /* shard 1's policy and layout before the raise */
    static const char *const keys[] = { "policy", "shard" };
    redisReply *saved[2];
    for (int i = 0; i < 2; i++)
        saved[i] = e2e_rcmd(g_redis, "DUMP %s:{%s:1.0}:%s", g_prefix, q, keys[i]);
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":3}");
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    for (int i = 0; i < 2; i++) {   /* the copy to shard 1 never came */
        assert_int_equal(saved[i]->type, REDIS_REPLY_STRING);
        freeReplyObject(e2e_rcmd(g_redis, "RESTORE %s:{%s:1.0}:%s 0 %b REPLACE", g_prefix, q,
                                 keys[i], saved[i]->str, saved[i]->len));
        freeReplyObject(saved[i]);
    }
    side(&r, "DELETE", message_path(q, held, NULL), NULL);
    assert_int_equal(r.status, 204);
    close_raise(q);
    e2e_response_free(&r);
    stop_side();
}

/* Review of the settling: a queue dropped while its raise settles keeps
 * `from` in shard 0's layout (drop_queue leaves the layout key, and no round
 * closes the raise of a queue without `shards`): a queue created again under
 * the name says shards_settling and refuses every raise with 409. */
static void test_shards_drop_while_a_raise_settles(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64], hold[32];
    e2e_queue_name(q, sizeof q, "dropsettling");
    group_leaving_shard_0(hold, sizeof hold, 1, 2);
    e2e_response_t r = { 0 };
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"hold\",\"group\":\"%s\",\"delay_seconds\":3600}", hold));
    e2e_expect_json(&r, 201);
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":2}");
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    side(&r, "DELETE", e2e_fmt("/queues/%s", q), NULL);
    assert_int_equal(r.status, 204);
    side(&r, "POST", messages_path(q), "{\"payload\":\"again\"}");
    e2e_expect_json(&r, 201);
    side(&r, "GET", e2e_fmt("/queues/%s/policy", q), NULL);
    assert_false(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "shards_settling")));
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":2}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 2);
    e2e_response_free(&r);
    stop_side();
}

/* Keys of q's shard k (k 0: the queue's own base) in Redis. */
static long long shard_keys(const char *q, int k)
{
    redisReply *x = k == 0 ? e2e_rcmd(g_redis, "KEYS %s:{%s}:*", g_prefix, q)
                           : e2e_rcmd(g_redis, "KEYS %s:{%s:%d.0}:*", g_prefix, q, k);
    long long n = 0;
    for (size_t i = 0; i < x->elements; i++)   /* the layout stays: its rev grows across a drop */
        n += strcmp(strrchr(x->element[i]->str, ':'), ":shard") != 0;
    freeReplyObject(x);
    return n;
}

/* DELETE /queues/{q} of a sharded queue empties every shard, the last
 * first, shard 0 last with its registry entries; afterwards the name is a
 * new queue of one shard. From the daemon without a view too. */
static void test_shards_drop_every_shard(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "dropped", 3);
    e2e_response_t r = { 0 };
    for (int i = 0; i < 9; i++) {
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x%d\"}", i));
        e2e_expect_json(&r, 201);
    }
    long long dead[3];
    dead_letters(q, dead, 3);
    for (int k = 0; k < 3; k++) assert_true(shard_keys(q, k) > 0);
    http(&r, "DELETE", e2e_fmt("/queues/%s", q), NULL);
    assert_int_equal(r.status, 204);
    for (int k = 0; k < 3; k++)
        if (shard_keys(q, k) != 0) fail_msg("shard %d keeps %lld keys", k, shard_keys(q, k));
    side(&r, "GET", e2e_fmt("/queues/%s/policy", q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 1);
    side(&r, "POST", messages_path(q), "{\"payload\":\"anew\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    e2e_response_free(&r);
    stop_side();
}


/* Regression (review of step 10): a queue lowered from 3 shards to 2 keeps shard 2 retired (its
 * keys: seq, the policy copy, lifetime counters). A DELETE afterwards walks
 * the view's 2 shards only: shard 2's keys are never deleted, though the
 * drop is "a drop that leaves no key on any shard". */
static void test_shards_drop_after_lowering_leaves_no_key(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "droplow", 3);
    e2e_response_t r = { 0 };
    for (int i = 0; i < 6; i++) {   /* round robin: 2 a shard, then all deleted */
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"x%d\"}", i));
        long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
        side(&r, "DELETE", message_path(q, id, NULL), NULL);
        assert_int_equal(r.status, 204);
    }
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":2}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 2);
    assert_true(shard_keys(q, 2) > 0);   /* retired, kept */
    side(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
    e2e_expect_json(&r, 201);
    side(&r, "DELETE", e2e_fmt("/queues/%s", q), NULL);
    assert_int_equal(r.status, 204);
    for (int k = 0; k < 3; k++)
        if (shard_keys(q, k) != 0) {
            redisReply *x = e2e_rcmd(g_redis, "KEYS %s:{%s:%d.0}:*", g_prefix, q, k);
            for (size_t i = 0; i < x->elements; i++) print_message("  %s\n", x->element[i]->str);
            freeReplyObject(x);
            fail_msg("shard %d keeps %lld keys", k, shard_keys(q, k));
        }
    e2e_response_free(&r);
    stop_side();
}

/* Regression (review of step 10): "s<k>. past the count ends the listing (the queue was lowered)"
 * (docs/sharding.md step 10). Lowered to 1 shard, the same cursor is
 * sent to shard 0's list as is and answered 422 on cursor. */
static void test_shards_cursor_past_a_queue_lowered_to_one(void **state)
{
    (void)state;
    char q[64];
    sharded_queue(q, sizeof q, "lowone", 3);
    e2e_response_t r = { 0 };
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=s2.", messages_path(q)), NULL);
    e2e_expect_json(&r, 200);   /* 3 shards: s2. is shard 2's start */
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":2}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 2);
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=s2.", messages_path(q)), NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);   /* lowered to 2: the end */
    assert_true(rd_json_is_null(e2e_jget(page, "next_cursor")));
    side(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"shards\":1}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 1);
    side(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
    e2e_expect_json(&r, 201);
    side(&r, "GET", e2e_fmt("%s?limit=5&cursor=s2.", messages_path(q)), NULL);
    if (r.status != 200) fail_msg("lowered to 1: cursor s2. answered %d: %.*s", r.status,
                                  (int)r.body_len, r.body);
    page = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(page, "messages")), 0);
    assert_true(rd_json_is_null(e2e_jget(page, "next_cursor")));
    e2e_response_free(&r);
    stop_side();
}

/* Regression (review of step 10): a request refused for a limit on a sharded queue ("nothing was
 * changed") still recorded its dead_letter_queue in the registry's graph
 * (dlq_link runs before policy_set): the target's own PUT pointing back is
 * then refused as a cycle that does not exist. */
static void test_shards_refused_limit_links_no_dead_letter_queue(void **state)
{
    (void)state;
    char q[64], d[64];
    sharded_queue(q, sizeof q, "limlink", 3);
    e2e_queue_name(d, sizeof d, "limlink-dlq");
    e2e_response_t r = { 0 };
    const char *policy = e2e_fmt("/queues/%s/policy", q);
    side(&r, "PATCH", policy, e2e_fmt("{\"max_in_flight\":5,\"dead_letter_queue\":\"%s\"}", d));
    e2e_expect_problem(&r, 409, "invalid-state", policy);
    side(&r, "GET", policy, NULL);
    e2e_jnull(e2e_expect_json(&r, 200), "dead_letter_queue");
    const char *back = e2e_fmt("/queues/%s/policy", d);
    side(&r, "PUT", back, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", q));
    if (r.status != 200)
        fail_msg("%s -> %s refused (%d) after a refused PATCH: %.*s", d, q, r.status,
                 (int)r.body_len, r.body);
    e2e_response_free(&r);
    stop_side();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_shards_listing_pages_every_shard),
        T(test_shards_listing_cursors),
        T(test_shards_groups_listing),
        T(test_shards_replay_every_shard),
        T(test_shards_redrive_every_shard),
        T(test_shards_series_sum_every_shard),
        T(test_shards_drop_every_shard),
        T(test_shards_refuse_limits_not_held_across_shards),
        T(test_shards_raise_settles_when_strays_drain),
        T(test_shards_change_ignores_other_libraries),
        T(test_shards_drop_after_lowering_leaves_no_key),
        T(test_shards_cursor_past_a_queue_lowered_to_one),
        T(test_shards_refused_limit_links_no_dead_letter_queue),
        T(test_shards_redrive_keeps_a_group_on_one_shard),
        T(test_shards_replay_during_a_raise_keeps_it_unsettled),
        T(test_shards_raise_with_a_lost_copy_settles),
        T(test_shards_drop_while_a_raise_settles),
    };
    int failed = cmocka_run_group_tests_name("e2e_shards", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
