/* test_lua_groups.c - integration tests of the Redis Functions library (lua/)
 * against a real redis-server: fairness groups (docs/fairness.md). Claims
 * serve groups round-robin, a group's backlog never delays another group's
 * message by more than one claim per active group; priority orders messages
 * inside a group; group_max_in_flight, group_rate_limit and fifo_groups hold
 * a group back; the per-group counts and sets follow every path a message
 * takes, and an emptied group leaves no key; a queue that never used groups
 * writes none of their keys.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_groups"
#include "lua_support.h"

/* Claimed messages land here: a msg_t is ~20 KB, too big for the stack by
 * the hundred. */
static msg_t g_msgs[100];

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Enqueues payload in group ("" or NULL: none) with priority and delay, as
 * the daemon does (ARGV[7] "" ttl, ARGV[9] the group). Returns the id. */
static long long enqueue_full(const queue_t *q, const char *payload, const char *group,
                              int priority, long long delay_ms, const char *max_retries,
                              long long ttl_ms)
{
    redisReply *r = fcall("enqueue", q, -1, payload, max_retries, num(delay_ms), "", "", "",
                          ttl_ms < 0 ? "" : num(ttl_ms), num(priority), group ? group : "", END);
    if (!has_code(r, "ok") || r->elements != 6 || r->element[1]->type != REDIS_REPLY_INTEGER)
        fail_msg("enqueue in group %s: %s", group ? group : "(none)", reply_desc(r));
    long long id = r->element[1]->integer;
    freeReplyObject(r);
    return id;
}

static long long enqueue_group(const queue_t *q, const char *payload, const char *group,
                               int priority, long long delay_ms)
{
    return enqueue_full(q, payload, group, priority, delay_ms, "3", -1);
}

/* The message's group, "" when it has none. */
static const char *group_of(const msg_t *m)
{
    const field_t *f = msg_field(m, "group");
    return f ? f->value : "";
}

/* Claims up to count (lease_ms each) into g_msgs; returns how many. */
static size_t claim_n(const queue_t *q, long long lease_ms, int count)
{
    return expect_ok_msgs(fcall("claim", q, -1, num(lease_ms), num(count), END), g_msgs,
                          sizeof g_msgs / sizeof g_msgs[0]);
}

/* A claim as the daemon makes it (timer hints, the policy's lease): returns
 * how many, into g_msgs; *retry_ms gets the value after the hint, the ms
 * until a rate limit's next token (0 when no limit held the claim back). A
 * claim that leased nothing ends with two more (the policy's wait_ms, known). */
static size_t claim_flow(const queue_t *q, int count, long long *retry_ms)
{
    redisReply *r = fcall("claim", q, -1, "30000", num(count), "1", "default", END);
    size_t n = 0;
    while (r->type == REDIS_REPLY_ARRAY && 1 + n < r->elements &&
           r->element[1 + n]->type == REDIS_REPLY_ARRAY)
        n++;
    if (!has_code(r, "ok") || r->elements != 1 + n + 2 + (n == 0 ? 2 : 0) ||
        r->element[1 + n]->type != REDIS_REPLY_INTEGER ||
        r->element[2 + n]->type != REDIS_REPLY_INTEGER)
        fail_msg("claim with flow: %s", reply_desc(r));
    assert_true(n <= sizeof g_msgs / sizeof g_msgs[0]);
    for (size_t i = 0; i < n; i++)
        msg_parse(r->element[1 + i], &g_msgs[i]);
    *retry_ms = r->element[2 + n]->integer;
    freeReplyObject(r);
    return n;
}

static void succeed_msg(const queue_t *q, const msg_t *leased)
{
    msg_t m;
    expect_ok_msg(fcall("succeed", q, leased->id, msg_str(leased, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
}

/* Fails a leased message with a retry in retry_after_ms; returns its status. */
static const char *fail_msg_after(const queue_t *q, const msg_t *leased, const char *retryable,
                                  long long retry_after_ms)
{
    static char status[32];
    msg_t m;
    expect_ok_msg(fcall("fail", q, leased->id, msg_str(leased, "lease_token"), "boom", retryable,
                        num(retry_after_ms), END), &m);
    snprintf(status, sizeof status, "%.31s", msg_str(&m, "status"));
    return status;
}

static void release_msg(const queue_t *q, const msg_t *leased)
{
    assert_int_equal(int_reply(fcall("release", q, -1, num(leased->id),
                                     msg_str(leased, "lease_token"), END)), 1);
}

static long long tick(const queue_t *q)
{
    long long r[TICK_N];
    expect_ints(fcall("tick", q, -1, "100", "0", "0", END), TICK_N, r);
    return r[1];   /* reclaimed */
}

/* The groups page's counts of group g: *pending and *processing, or both -1
 * when the page does not show it (at most 1000 groups are looked at). */
static void group_counts(const queue_t *q, const char *g, long long *pending,
                         long long *processing)
{
    *pending = *processing = -1;
    redisReply *r = fcall("groups", q, -1, "", "1000", END);
    if (!has_code(r, "ok") || r->elements < 2 || (r->elements - 2) % 3 != 0)
        fail_msg("groups: %s", reply_desc(r));
    for (size_t i = 2; i < r->elements; i += 3) {
        assert_int_equal(r->element[i]->type, REDIS_REPLY_STRING);
        assert_int_equal(r->element[i + 1]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->element[i + 2]->type, REDIS_REPLY_INTEGER);
        if (strcmp(r->element[i]->str, g) == 0) {
            *pending = r->element[i + 1]->integer;
            *processing = r->element[i + 2]->integer;
        }
    }
    freeReplyObject(r);
}

#define expect_group(q, g, pending, processing) \
    expect_group_at((q), (g), (pending), (processing), __FILE__, __LINE__)
static void expect_group_at(const queue_t *q, const char *g, long long pending,
                            long long processing, const char *file, int line)
{
    long long p, i;
    group_counts(q, g, &p, &i);
    if (pending == 0 && processing == 0) {
        if (p != -1)
            FAIL_AT(file, line, "group %s should be gone from the page, shows %lld pending, "
                    "%lld processing", g, p, i);
        return;
    }
    if (p != pending || i != processing)
        FAIL_AT(file, line, "group %s: %lld pending, %lld processing; expected %lld, %lld", g, p,
                i, pending, processing);
}

/* A value of the stats reply (its flat name, value pairs), -1 when absent. */
static long long stat_value(const queue_t *q, const char *name)
{
    redisReply *r = fcall("stats", q, -1, "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long v = -1;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, name) == 0 && r->element[i + 1]->type == REDIS_REPLY_INTEGER)
            v = r->element[i + 1]->integer;
    freeReplyObject(r);
    return v;
}

/* How many keys of the queue match "<base>:<pattern>". */
static long long keys_matching(const queue_t *q, const char *pattern)
{
    redisReply *r = rcmd("KEYS", qkey(q, pattern), END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    for (size_t i = 0; i < r->elements; i++)
        print_message("  left: %s\n", r->element[i]->str);
    freeReplyObject(r);
    return n;
}

/* None of the groups' keys: gq:<group>, rotation, rotating, gheld, groups,
 * gcount, grouped (a bucket expires by itself and is not looked at). */
#define expect_no_group_keys(q) expect_no_group_keys_at((q), __FILE__, __LINE__)
static void expect_no_group_keys_at(const queue_t *q, const char *file, int line)
{
    long long n = keys_matching(q, "3:gq:*") + keys_matching(q, "3:rotat*") +
                  keys_matching(q, "3:gheld") + keys_matching(q, "3:groups") +
                  keys_matching(q, "3:gcount") + keys_matching(q, "3:grouped");
    if (n != 0) FAIL_AT(file, line, "%lld group keys left", n);
}

/* Claims one at a time (a minute's lease) and succeeds each, until nothing
 * is claimable; returns how many. */
static int drain(const queue_t *q)
{
    int n = 0;
    while (claim_n(q, 60000, 1) == 1) {
        msg_t m = g_msgs[0];
        succeed_msg(q, &m);
        n++;
        assert_true(n < 100000);
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Round-robin                                                              */
/* ------------------------------------------------------------------------ */

/* One group's backlog of 2,000 delays no other group by more than one claim
 * per active group: ten groups of five enqueued after it are each served in
 * the first eleven claims. */
static void test_backlog_does_not_delay_other_groups(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "fairbig");
    for (int i = 0; i < 2000; i++) enqueue_group(&q, "big", "big", 0, 0);
    char names[10][16];
    for (int g = 0; g < 10; g++) {
        snprintf(names[g], sizeof names[g], "s%d", g);
        for (int i = 0; i < 5; i++) enqueue_group(&q, "small", names[g], 0, 0);
    }
    int seen[10] = { 0 }, big = 0;
    for (int c = 0; c < 11; c++) {
        assert_int_equal(claim_n(&q, 60000, 1), 1);
        const char *g = group_of(&g_msgs[0]);
        if (strcmp(g, "big") == 0) { big++; continue; }
        assert_int_equal(g[0], 's');
        seen[atoi(g + 1)]++;
    }
    for (int g = 0; g < 10; g++)
        if (seen[g] != 1) fail_msg("group %s served %d times in the first 11 claims", names[g], seen[g]);
    assert_int_equal(big, 1);
    expect_group(&q, "big", 1999, 1);
    expect_group(&q, "s3", 4, 1);
    assert_int_equal(stat_value(&q, "groups"), 11);
    assert_int_equal(stat_value(&q, "ready"), 1999 + 40);
}

/* A batch takes one message per group in rotation order, then goes round
 * again; inside a group, FIFO. */
static void test_batch_goes_round(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "round");
    long long ids[3][5];
    const char *names[3] = { "a", "b", "c" };
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 5; i++) ids[g][i] = enqueue_group(&q, names[g], names[g], 0, 0);
    assert_int_equal(claim_n(&q, 60000, 10), 10);
    int next[3] = { 0 };
    for (int i = 0; i < 10; i++) {
        int g = i % 3;
        assert_string_equal(group_of(&g_msgs[i]), names[g]);
        assert_int_equal(g_msgs[i].id, ids[g][next[g]++]);
    }
    /* The rotation goes on where it stopped: b, c, a, b, c. */
    assert_int_equal(claim_n(&q, 60000, 10), 5);
    const char *want = "bcabc";
    for (int i = 0; i < 5; i++) {
        int g = want[i] - 'a';
        assert_string_equal(group_of(&g_msgs[i]), names[g]);
        assert_int_equal(g_msgs[i].id, ids[g][next[g]++]);
    }
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    expect_group(&q, "a", 0, 5);
}

/* Priority orders the messages of a group, not the groups: a group's p9
 * waits for its turn behind another group's p0. */
static void test_priority_inside_a_group(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "prio");
    long long a0 = enqueue_group(&q, "a0", "a", 0, 0);
    long long a5 = enqueue_group(&q, "a5", "a", 5, 0);
    long long a9 = enqueue_group(&q, "a9", "a", 9, 0);
    long long b9 = enqueue_group(&q, "b9", "b", 9, 0);
    long long b0 = enqueue_group(&q, "b0", "b", 0, 0);
    const long long want[] = { a9, b9, a5, b0, a0 };
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(claim_n(&q, 60000, 1), 1);
        assert_int_equal(g_msgs[0].id, want[i]);
    }
    assert_string_equal(msg_str(&g_msgs[0], "group"), "a");
    assert_int_equal(msg_int(&g_msgs[0], "created_at") > 0, 1);
}

/* A due retry, a replay and a released lease come before the group's fresh
 * messages; ungrouped messages are one more member of the rotation. */
static void test_due_before_fresh_and_ungrouped_turn(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "duefirst");
    long long a1 = enqueue_group(&q, "a1", "a", 0, 0);
    long long a2 = enqueue_group(&q, "a2", "a", 0, 0);
    long long a3 = enqueue_group(&q, "a3", "a", 0, 0);
    /* A retry made due. */
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    msg_t m = g_msgs[0];
    assert_int_equal(m.id, a1);
    assert_string_equal(fail_msg_after(&q, &m, "1", 60000), "pending");
    expect_group(&q, "a", 3, 0);
    make_due(&q, a1);
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    assert_int_equal(m.id, a1);
    /* A release: back first. */
    release_msg(&q, &m);
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    assert_int_equal(m.id, a1);
    /* A replay of a dead letter of the group. */
    assert_string_equal(fail_msg_after(&q, &m, "0", 0), "dead");
    expect_group(&q, "a", 2, 0);
    msg_t r;
    expect_ok_msg(fcall("replay", &q, a1, END), &r);
    assert_string_equal(msg_str(&r, "status"), "pending");
    assert_string_equal(msg_str(&r, "group"), "a");
    expect_group(&q, "a", 3, 0);
    const long long want[] = { a1, a2, a3 };
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(claim_n(&q, 60000, 1), 1);
        assert_int_equal(g_msgs[0].id, want[i]);
    }

    /* Ungrouped messages take their turn as "" between the groups. */
    queue_t u;
    queue_init(&u, "ungroupedturn");
    long long x[3], y[3], z[3];
    for (int i = 0; i < 3; i++) x[i] = enqueue_group(&u, "x", "x", 0, 0);
    for (int i = 0; i < 3; i++) y[i] = enqueue_group(&u, "plain", "", 0, 0);
    for (int i = 0; i < 3; i++) z[i] = enqueue_group(&u, "z", "z", 0, 0);
    assert_int_equal(claim_n(&u, 60000, 9), 9);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(g_msgs[3 * i].id, x[i]);
        assert_int_equal(g_msgs[3 * i + 1].id, y[i]);
        assert_no_field(&g_msgs[3 * i + 1], "group");
        assert_int_equal(g_msgs[3 * i + 2].id, z[i]);
    }
}

/* An ungrouped backlog that was there before the queue's first grouped
 * message takes its turns too: it is not left until every group is empty. */
static void test_ungrouped_backlog_before_first_group(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "oldbacklog");
    long long u1 = enqueue_group(&q, "plain", "", 0, 0);
    enqueue_group(&q, "plain", "", 0, 0);
    for (int i = 0; i < 5; i++) enqueue_group(&q, "a", "a", 0, 0);
    int plain = 0;
    for (int c = 0; c < 4; c++) {
        assert_int_equal(claim_n(&q, 60000, 1), 1);
        if (group_of(&g_msgs[0])[0] == '\0') {
            assert_int_equal(g_msgs[0].id, u1 + plain);
            plain++;
        }
    }
    if (plain != 2) fail_msg("%d of 2 ungrouped messages in the first 4 claims", plain);
}


/* More than a claim's 100 dropped ids (expired ungrouped ones the tick has
 * not ended yet) in front of the ungrouped messages: the claim stops there,
 * but the ungrouped member keeps its place, so the ungrouped message behind
 * them still takes its turn before the group's backlog is done. */
static void test_ungrouped_turn_past_expired_ids(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "expiredturn");
    long long at = 0;
    for (int i = 0; i < 150; i++) enqueue_with(&q, "old", 0, 300, 0, &at);
    long long fresh = enqueue_group(&q, "fresh", "", 0, 0);
    for (int i = 0; i < 20; i++) enqueue_group(&q, "a", "a", 0, 0);
    wait_until_ms(at);
    long long retry = 0;
    int claims = 0, before = -1;
    for (int i = 0; i < 20 && before < 0; i++) {
        size_t n = claim_flow(&q, 1, &retry);
        claims++;
        if (n == 0 && retry == 0) fail_msg("claim %d: empty, and no retry said", claims);
        if (n == 1 && g_msgs[0].id == fresh) before = i;
    }
    if (before < 0) fail_msg("the ungrouped message was not claimed in 20 claims");
    assert_in_range(before, 1, 4);
    assert_int_equal(counter(&q, "expired"), 150);
}

/* ------------------------------------------------------------------------ */
/* Limits                                                                   */
/* ------------------------------------------------------------------------ */

/* group_max_in_flight: never exceeded; the group comes back when a lease
 * ends by a success, a failure, a release or its expiry. */
static void test_group_max_in_flight(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "gcap");
    policy_set(&q, "merge", "group_max_in_flight", "2");
    for (int i = 0; i < 8; i++) enqueue_group(&q, "a", "a", 0, 0);
    for (int i = 0; i < 2; i++) enqueue_group(&q, "b", "b", 0, 0);
    assert_int_equal(claim_n(&q, 60000, 10), 4);
    int na = 0, nb = 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(group_of(&g_msgs[i]), "a") == 0) na++; else nb++;
    }
    assert_int_equal(na, 2);
    assert_int_equal(nb, 2);
    msg_t a1 = g_msgs[0], a2 = g_msgs[2];
    assert_string_equal(group_of(&a2), "a");
    assert_true(counter(&q, "held_group_cap") >= 2);
    expect_group(&q, "a", 6, 2);
    expect_group(&q, "b", 0, 2);
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    long long held = counter(&q, "held_group_cap");

    /* A success frees one place, not two. */
    succeed_msg(&q, &a1);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    a1 = g_msgs[0];
    assert_string_equal(group_of(&a1), "a");
    expect_group(&q, "a", 5, 2);
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    assert_true(counter(&q, "held_group_cap") > held);
    /* A failure to a retry. */
    assert_string_equal(fail_msg_after(&q, &a1, "1", 60000), "pending");
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    a1 = g_msgs[0];
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    /* A release. */
    release_msg(&q, &a1);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    assert_int_equal(g_msgs[0].id, a1.id);
    a1 = g_msgs[0];
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    expect_group(&q, "a", 5, 2);
    /* A lease expiry: a2 is released, a1 re-claimed with a short lease that
     * the tick fails. */
    release_msg(&q, &a1);
    assert_int_equal(claim_n(&q, 50, 1), 1);
    a1 = g_msgs[0];
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    wait_until_ms(msg_int(&a1, "lease_expires_at") + 1);
    assert_int_equal(tick(&q), 1);
    expect_group(&q, "a", 6, 1);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    assert_string_equal(group_of(&g_msgs[0]), "a");
    expect_group(&q, "a", 5, 2);
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    (void)a2;
}

/* group_rate_limit: a group's burst, then one token per 1/per_second on
 * Redis's clock; the claim that took nothing answers the wait; another
 * group is not held by it. */
static void test_group_rate_limit(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "grate");
    policy_set(&q, "merge", "group_rate_limit.per_second", "5", "group_rate_limit.burst", "2");
    for (int i = 0; i < 5; i++) enqueue_group(&q, "a", "a", 0, 0);
    long long retry;
    assert_int_equal(claim_flow(&q, 10, &retry), 2);
    assert_int_equal(retry, 0);
    assert_int_equal(claim_flow(&q, 1, &retry), 0);
    long long t0 = redis_now_ms();   /* at or after that claim's now */
    long long wait = retry;
    assert_in_range(wait, 1, 200);
    assert_true(counter(&q, "held_group_rate") >= 1);
    /* Another group is not held back by a's limit. */
    long long b = enqueue_group(&q, "b", "b", 0, 0);
    assert_int_equal(claim_flow(&q, 10, &retry), 1);
    assert_int_equal(g_msgs[0].id, b);
    /* a comes back once its token is due, one message. */
    assert_int_equal(claim_flow(&q, 10, &retry), 0);   /* not yet */
    wait_until_ms(t0 + wait);
    assert_int_equal(claim_flow(&q, 10, &retry), 1);
    assert_string_equal(group_of(&g_msgs[0]), "a");
    assert_int_equal(claim_flow(&q, 10, &retry), 0);
    assert_in_range(retry, 1, 200);
    /* Over a second the bucket (empty now) gives one token per 200 ms: the
     * claims that follow each wait take about that many, never more. */
    for (int i = 0; i < 20; i++) enqueue_group(&q, "a", "a", 0, 0);
    long long start = redis_now_ms(), end = start;
    int got = 0;
    while ((end = redis_now_ms()) < start + 1000) {
        got += (int)claim_flow(&q, 10, &retry);
        if (retry > 0) wait_until_ms(redis_now_ms() + retry);
    }
    long long tokens = (end - start) / 200;
    if (got > tokens + 1 || got < tokens - 1)
        fail_msg("%d claimed in %lld ms at 5 per second", got, end - start);
    expect_group(&q, "a", 22 - got, 3 + got);
}

/* fifo_groups: never two of a group processing; a failed message comes back
 * before the group's later ones; over a run with random failures each
 * group's successes come in enqueue order. */
static void test_fifo_groups(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "fifo");
    policy_set(&q, "merge", "fifo_groups", "true");
    enum { GROUPS = 4, EACH = 12 };
    long long ids[GROUPS][EACH];
    char names[GROUPS][16];
    for (int g = 0; g < GROUPS; g++) snprintf(names[g], sizeof names[g], "f%d", g);
    for (int i = 0; i < EACH; i++)
        for (int g = 0; g < GROUPS; g++)
            ids[g][i] = enqueue_full(&q, "m", names[g], 0, 0, "10", -1);
    /* One per group at a time. */
    static msg_t out[GROUPS];
    assert_int_equal(claim_n(&q, 60000, 10), GROUPS);
    for (int g = 0; g < GROUPS; g++) {
        out[g] = g_msgs[g];
        assert_string_equal(group_of(&out[g]), names[g]);
        assert_int_equal(out[g].id, ids[g][0]);
    }
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    /* A failure: the group waits for the retry, which comes first. */
    assert_string_equal(fail_msg_after(&q, &out[0], "1", 60000), "pending");
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    make_due(&q, out[0].id);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    assert_int_equal(g_msgs[0].id, ids[0][0]);
    out[0] = g_msgs[0];
    int done[GROUPS] = { 0 };
    for (int g = 0; g < GROUPS; g++) {
        succeed_msg(&q, &out[g]);
        done[g]++;
    }
    unsigned seed = 12345;
    for (int round = 0; round < 1000; round++) {
        size_t n = claim_n(&q, 60000, 10);
        if (n == 0) {
            /* Retries waiting: make them due. */
            redisReply *r = rcmd("ZRANGE", qkey(&q, "3:scheduled"), "0", "-1", END);
            size_t waiting = r->elements;
            for (size_t i = 0; i < r->elements; i++) make_due(&q, atoll(r->element[i]->str));
            freeReplyObject(r);
            if (waiting == 0) break;
            continue;
        }
        int busy[GROUPS] = { 0 };
        for (size_t i = 0; i < n; i++) {
            int g = -1;
            for (int j = 0; j < GROUPS; j++) if (strcmp(group_of(&g_msgs[i]), names[j]) == 0) g = j;
            assert_true(g >= 0);
            if (++busy[g] > 1) fail_msg("two of group %s processing", names[g]);
            if (g_msgs[i].id != ids[g][done[g]])
                fail_msg("group %s: claimed %lld, the next in order is %lld", names[g],
                         g_msgs[i].id, ids[g][done[g]]);
            seed = seed * 1103515245u + 12345u;
            if ((seed >> 16) % 3 == 0) {
                assert_string_equal(fail_msg_after(&q, &g_msgs[i], "1", 60000), "pending");
            } else {
                succeed_msg(&q, &g_msgs[i]);
                done[g]++;
            }
        }
    }
    for (int g = 0; g < GROUPS; g++) assert_int_equal(done[g], EACH);
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    expect_no_group_keys(&q);
}

/* fifo_groups: a kill or delete of the group's scheduled retry, or its
 * expiry, lets the group's next message be claimed. */
static void test_fifo_group_after_its_retry_leaves(void **state)
{
    (void)state;
    const char *how[] = { "kill", "delete", "expire" };
    for (size_t w = 0; w < 3; w++) {
        queue_t q;
        queue_init(&q, how[w]);
        policy_set(&q, "merge", "fifo_groups", "true");
        long long first = enqueue_full(&q, "first", "a", 0, 0, "5", w == 2 ? 400 : -1);
        long long second = enqueue_group(&q, "second", "a", 0, 0);
        assert_int_equal(claim_n(&q, 60000, 1), 1);
        assert_int_equal(g_msgs[0].id, first);
        msg_t m = g_msgs[0];
        assert_string_equal(fail_msg_after(&q, &m, "1", 60000), "pending");
        assert_int_equal(claim_n(&q, 60000, 1), 0);   /* held: its retry waits */
        if (w == 0) {
            expect_ok_msg(fcall("kill", &q, first, END), &m);
            assert_string_equal(msg_str(&m, "status"), "dead");
        } else if (w == 1) {
            expect_code(fcall("delete", &q, first, END), "ok", NULL);
        } else {
            wait_until_ms(msg_int(&m, "expires_at"));
            tick(&q);
            expect_ok_msg(fcall("get", &q, first, END), &m);
            assert_string_equal(msg_str(&m, "status"), "dead");
        }
        expect_group(&q, "a", 1, 0);
        if (claim_n(&q, 60000, 1) != 1)
            fail_msg("after the %s of its retry, group a's next message is never claimed", how[w]);
        assert_int_equal(g_msgs[0].id, second);
    }
}


/* fifo_groups with a delayed message: the group waits for it (strict order),
 * then serves it in its enqueue order, not as a due retry ahead of the
 * group's earlier message. */
static void test_fifo_delayed_message_keeps_its_place(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "fifodelay");
    policy_set(&q, "merge", "fifo_groups", "true");
    long long m1 = enqueue_group(&q, "m1", "a", 0, 0);
    long long m2 = enqueue_group(&q, "m2", "a", 0, 300);
    long long m3 = enqueue_group(&q, "m3", "a", 0, 0);
    /* m2 is scheduled: the group waits (its order would break otherwise). */
    assert_int_equal(claim_n(&q, 60000, 5), 0);
    make_due(&q, m2);
    long long want[] = { m1, m2, m3 };
    for (int i = 0; i < 3; i++) {
        if (claim_n(&q, 60000, 5) != 1) fail_msg("claim %d of the fifo group took none or more", i);
        assert_int_equal(g_msgs[0].id, want[i]);
        succeed_msg(&q, &g_msgs[0]);
    }
    expect_group(&q, "a", 0, 0);
}

/* A group held back by group_max_in_flight or fifo_groups is served again
 * once the policy no longer has the limit, without waiting for one of its
 * leases to end. */
static void test_loosened_policy_releases_held_groups(void **state)
{
    (void)state;
    const char *fields[][2] = { { "group_max_in_flight", "1" }, { "fifo_groups", "true" } };
    for (size_t w = 0; w < 2; w++) {
        queue_t q;
        queue_init(&q, w == 0 ? "loosecap" : "loosefifo");
        policy_set(&q, "merge", fields[w][0], fields[w][1]);
        for (int i = 0; i < 3; i++) enqueue_group(&q, "x", "a", 0, 0);
        assert_int_equal(claim_n(&q, 60000, 5), 1);   /* the group is held after one */
        assert_int_equal(claim_n(&q, 60000, 5), 0);
        policy_set(&q, "merge", fields[w][0], "");
        if (claim_n(&q, 60000, 5) != 2)
            fail_msg("with %s removed, the held group's two messages were not claimed", fields[w][0]);
        expect_group(&q, "a", 0, 3);
        assert_int_equal(exists(qkey(&q, "3:gwaiting")), 0);
    }
}

/* Group names at the edges of the record's short form (a trailer of the
 * group alone, read without the general decode: fixstr up to 31 bytes) and
 * beyond it read back whole, alone and beside other optional fields; the
 * library refuses a name the daemon would refuse. */
static void test_group_names_round_trip(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "names");
    const size_t lens[] = { 1, 30, 31, 32, 56, 57, 127, 128 };
    char name[129];
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t j = 0; j < lens[i]; j++) name[j] = (char)('a' + (j + i) % 26);
        name[lens[i]] = '\0';
        for (int with_ttl = 0; with_ttl < 2; with_ttl++) {
            long long id = enqueue_full(&q, "p", name, 0, 0, "3", with_ttl ? 60000 : -1);
            msg_t m;
            expect_ok_msg(fcall("get", &q, id, END), &m);
            if (strcmp(group_of(&m), name) != 0)
                fail_msg("a group of %zu bytes came back as \"%s\"", lens[i], group_of(&m));
            assert_string_equal(msg_str(&m, "payload"), "p");
        }
    }
    /* Two-byte UTF-8 is a name; a broken sequence, a control byte, or 129
     * bytes are not. */
    long long id = enqueue_group(&q, "p", "\xc3\xa9t\xc3\xa9", 0, 0);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(group_of(&m), "\xc3\xa9t\xc3\xa9");
    char long_name[130];
    memset(long_name, 'z', 129);
    long_name[129] = '\0';
    const char *bad[] = { "\xc3", "a\x01" "b", "tab\there", long_name };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(fcall("enqueue", &q, -1, "p", "3", "0", "", "", "", "", "", bad[i], END));
}

/* More than a claim's 200 visits of groups that cannot serve (emptied by a
 * delete, or at their group_max_in_flight) before one that can: the claim
 * that comes back empty says to claim again at once (retry 1 ms), and the
 * next claims reach the group. */
static void test_claim_past_groups_that_cannot_serve(void **state)
{
    (void)state;
    for (int w = 0; w < 2; w++) {
        queue_t q;
        queue_init(&q, w == 0 ? "stale" : "capped");
        if (w == 1) policy_set(&q, "merge", "group_max_in_flight", "1");
        enum { N = 450 };
        for (int i = 0; i < N; i++) {
            char g[16];
            snprintf(g, sizeof g, "g%03d", i);
            long long id = enqueue_group(&q, "x", g, 0, 0);
            if (w == 0) expect_code(fcall("delete", &q, id, END), "ok", NULL);
            else enqueue_group(&q, "y", g, 0, 0);
        }
        if (w == 1)
            for (int i = 0; i < N; i += 50) assert_int_equal(claim_n(&q, 60000, 50), 50);
        long long want = enqueue_group(&q, "late", "zz", 0, 0);
        long long retry = 0;
        int claims = 0;
        size_t got = 0;
        do {
            got = claim_flow(&q, 1, &retry);
            claims++;
            if (got == 0 && retry == 0)
                fail_msg("%s: claim %d came back empty and says nothing: group zz waits", q.name,
                         claims);
        } while (got == 0 && claims < 10);
        assert_int_equal(got, 1);
        assert_int_equal(g_msgs[0].id, want);
        assert_in_range(claims, 2, 4);   /* 200 visits each */
    }
}

/* ------------------------------------------------------------------------ */
/* Counts and keys                                                          */
/* ------------------------------------------------------------------------ */

/* Every path a grouped message takes keeps the group's counts exact, and the
 * last message to leave takes the group's keys with it. */
static void test_counts_follow_every_path(void **state)
{
    (void)state;
    queue_t q, dlq;
    queue_init(&q, "counts");
    queue_init(&dlq, "countsdlq");
    msg_t m;
    long long a1 = enqueue_group(&q, "a1", "a", 0, 0);
    expect_group(&q, "a", 1, 0);
    /* A delayed enqueue, promoted by the tick. */
    long long a2 = enqueue_group(&q, "a2", "a", 0, 60000);
    expect_group(&q, "a", 2, 0);
    assert_int_equal(stat_value(&q, "scheduled"), 1);
    make_due(&q, a2);
    tick(&q);
    expect_group(&q, "a", 2, 0);
    assert_int_equal(stat_value(&q, "ready"), 2);
    /* Claim, succeed. */
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    expect_group(&q, "a", 1, 1);
    succeed_msg(&q, &m);
    expect_group(&q, "a", 1, 0);
    /* Fail to a retry, then to dead. */
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    assert_string_equal(fail_msg_after(&q, &m, "1", 60000), "pending");
    expect_group(&q, "a", 1, 0);
    make_due(&q, m.id);
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    expect_group(&q, "a", 0, 1);
    assert_string_equal(fail_msg_after(&q, &m, "0", 0), "dead");
    expect_group(&q, "a", 0, 0);
    assert_int_equal(stat_value(&q, "groups"), 0);
    /* Replay of the dead one. */
    expect_ok_msg(fcall("replay", &q, m.id, END), &m);
    expect_group(&q, "a", 1, 0);
    /* Snooze, release. */
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    expect_ok_msg(fcall("snooze", &q, m.id, msg_str(&m, "lease_token"), "60000", END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    expect_group(&q, "a", 1, 0);
    make_due(&q, m.id);
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    release_msg(&q, &m);
    expect_group(&q, "a", 1, 0);
    /* Kill pending and processing; delete pending (claimable and scheduled). */
    long long b1 = enqueue_group(&q, "b1", "b", 0, 0);
    long long b2 = enqueue_group(&q, "b2", "b", 0, 0);
    long long b3 = enqueue_group(&q, "b3", "b", 0, 0);
    long long b4 = enqueue_group(&q, "b4", "b", 0, 60000);
    expect_group(&q, "b", 4, 0);
    expect_ok_msg(fcall("kill", &q, b2, END), &m);
    expect_group(&q, "b", 3, 0);
    expect_code(fcall("delete", &q, b3, END), "ok", NULL);
    expect_code(fcall("delete", &q, b4, END), "ok", NULL);
    expect_group(&q, "b", 1, 0);
    /* a's one, then b1. */
    assert_int_equal(claim_n(&q, 60000, 2), 2);
    assert_int_equal(g_msgs[1].id, b1);
    expect_group(&q, "b", 0, 1);
    expect_group(&q, "a", 0, 1);
    expect_ok_msg(fcall("kill", &q, b1, END), &m);
    expect_group(&q, "b", 0, 0);
    msg_t last = g_msgs[0];
    succeed_msg(&q, &last);
    expect_group(&q, "a", 0, 0);
    (void)a1;
    /* Expiry of a pending grouped message (claimable and scheduled). */
    enqueue_full(&q, "c1", "c", 0, 0, "3", 300);
    enqueue_full(&q, "c2", "c", 0, 60000, "3", 300);
    expect_group(&q, "c", 2, 0);
    wait_until_ms(redis_now_ms() + 310);
    tick(&q);
    expect_group(&q, "c", 0, 0);
    /* The dead_letter_queue move: the group rides along. */
    policy_set(&q, "merge", "dead_letter_queue", dlq.name);
    long long d1 = enqueue_group(&q, "d1", "d", 0, 0);
    assert_int_equal(claim_n(&q, 60000, 1), 1);
    m = g_msgs[0];
    fail_msg_after(&q, &m, "0", 0);
    assert_true(zscore(qkey(&q, "3:redriving"), d1) > 0);
    expect_group(&q, "d", 0, 0);
    redisReply *r = fcall("redrive_take", &q, -1, "", "left", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    const redisReply *l = r->element[2];
    assert_int_equal(l->elements, 6);
    assert_int_equal(l->element[0]->integer, d1);
    const char *args[] = { q.name, num(d1), "0", "0", l->element[5]->str, l->element[3]->str };
    size_t lens[] = { strlen(q.name), strlen(args[1]), 1, 1, l->element[5]->len, l->element[3]->len };
    redisReply *in = fcall_bin("redrive_in", &dlq, -1, 6, args, lens);
    freeReplyObject(r);
    assert_int_equal(in->type, REDIS_REPLY_ARRAY);
    assert_int_equal(in->elements, 1);
    long long moved = in->element[0]->integer;
    freeReplyObject(in);
    assert_int_equal(int_reply(fcall("redrive_done", &q, -1, num(d1), num(moved), END)), 1);
    expect_group(&dlq, "d", 1, 0);
    expect_ok_msg(fcall("get", &dlq, moved, END), &m);
    assert_string_equal(msg_str(&m, "group"), "d");
    assert_int_equal(drain(&dlq), 1);
    assert_int_equal(claim_n(&dlq, 60000, 1), 0);
    expect_no_group_keys(&dlq);

    /* Everything done: a claim that finds nothing leaves no group key. */
    assert_int_equal(drain(&q), 0);
    assert_int_equal(stat_value(&q, "groups"), 0);
    assert_int_equal(stat_value(&q, "pending"), 0);
    assert_int_equal(stat_value(&q, "processing"), 0);
    expect_no_group_keys(&q);
}

/* The paths that lease or hand back many at once: settle_claim settles and
 * claims in turn, and a claim whose nonce release_lost gave up hands back
 * what it leased into the groups' sets, the counts as before the claim. */
static void test_settle_claim_and_lost_claims(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "lostclaim");
    long long a1 = enqueue_group(&q, "a1", "a", 0, 0);
    long long b1 = enqueue_group(&q, "b1", "b", 0, 0);
    long long a2 = enqueue_group(&q, "a2", "a", 0, 0);
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "n-1", END)), 0);
    redisReply *r = fcall("claim", &q, -1, "600000", "3", "1", "default", "", "n-1", END);
    assert_true(has_code(r, "ok"));
    /* No message: the hint, the rate's wait, the policy's wait_ms, known. */
    assert_int_equal(r->elements, 5);
    freeReplyObject(r);
    expect_group(&q, "a", 2, 0);
    expect_group(&q, "b", 1, 0);
    assert_int_equal(stat_value(&q, "processing"), 0);
    assert_int_equal(stat_value(&q, "ready"), 3);
    /* Handed back to the front of each group (the rotation turned on: b
     * comes first now). */
    assert_int_equal(claim_n(&q, 60000, 2), 2);
    assert_int_equal(g_msgs[0].id, b1);
    assert_int_equal(g_msgs[1].id, a1);
    {
        msg_t swap = g_msgs[0];
        g_msgs[0] = g_msgs[1];
        g_msgs[1] = swap;
    }
    static msg_t got[4];
    char ta[64], tb[64];
    token_of(&g_msgs[0], ta);
    token_of(&g_msgs[1], tb);
    const settle_t items[] = { SUCCEEDED(a1, ta), FAILED(b1, tb, "later", "1", 60000) };
    const char *want[] = { "succeeded", "pending" };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 2, 2, items), 2, want, got, 4), 1);
    assert_int_equal(got[0].id, a2);
    expect_group(&q, "a", 0, 1);
    expect_group(&q, "b", 1, 0);
    make_due(&q, b1);
    char t2[64];
    token_of(&got[0], t2);
    const settle_t last[] = { SUCCEEDED(a2, t2) };
    const char *ok[] = { "succeeded" };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 5, 1, last), 1, ok, got, 4), 1);
    assert_int_equal(got[0].id, b1);
    token_of(&got[0], t2);
    const settle_t done[] = { SUCCEEDED(b1, t2) };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 5, 1, done), 1, ok, got, 4), 0);
    expect_no_group_keys(&q);
}

/* Paging 10,000 groups by 1,000: each group once, in name order. */
static void test_groups_paged(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "paged");
    enum { N = 10000 };
    /* Pipelined: 10,000 enqueues in one round trip's worth of waiting. */
    char fn[64];
    snprintf(fn, sizeof fn, "%senqueue", RD_FUNCTION(""));
    for (int i = 0; i < N; i++) {
        char g[16];
        snprintf(g, sizeof g, "g%05d", (i * 7919) % N);   /* not in name order */
        const char *argv[] = { "FCALL", fn, "1", q.base, "x", "3", "0", "", "", "", "", "0", g };
        redisAppendCommandArgv(g_redis, 13, argv, NULL);
    }
    for (int i = 0; i < N; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(g_redis, (void **)&r), REDIS_OK);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }
    static char seen[N];
    memset(seen, 0, sizeof seen);
    char cursor[192] = "";
    int pages = 0, total = 0;
    char prev[192] = "";
    do {
        redisReply *r = fcall("groups", &q, -1, cursor, "1000", END);
        assert_true(has_code(r, "ok"));
        assert_true((r->elements - 2) % 3 == 0);
        assert_true((r->elements - 2) / 3 <= 1000);
        for (size_t i = 2; i < r->elements; i += 3) {
            const char *g = r->element[i]->str;
            assert_true(strcmp(g, prev) > 0);
            snprintf(prev, sizeof prev, "%s", g);
            int n = atoi(g + 1);
            assert_in_range(n, 0, N - 1);
            if (seen[n]++) fail_msg("group %s twice", g);
            assert_int_equal(r->element[i + 1]->integer, 1);
            assert_int_equal(r->element[i + 2]->integer, 0);
            total++;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[1]->str);
        freeReplyObject(r);
        pages++;
        assert_true(pages <= 11);
    } while (cursor[0] != '\0');
    assert_int_equal(total, N);
    assert_int_equal(stat_value(&q, "groups"), N);
    expect_error(fcall("groups", &q, -1, "", "1001", END));
    expect_error(fcall("groups", &q, -1, "", "0", END));
    /* A claim on 10,000 groups still takes one per group. */
    assert_int_equal(claim_n(&q, 60000, 100), 100);
    for (int i = 0; i < 100; i++)
        for (int j = 0; j < i; j++)
            assert_string_not_equal(group_of(&g_msgs[i]), group_of(&g_msgs[j]));
}

/* Listings, exports and stats see grouped pending messages. */
static void test_listing_export_stats(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "listing");
    long long a = enqueue_group(&q, "pa", "a", 0, 0);
    long long b = enqueue_group(&q, "pb", "b", 3, 0);
    long long s = enqueue_group(&q, "ps", "a", 0, 60000);
    long long u = enqueue_group(&q, "pu", "", 0, 0);
    assert_int_equal(stat_value(&q, "ready"), 3);
    assert_int_equal(stat_value(&q, "pending"), 4);
    assert_int_equal(stat_value(&q, "scheduled"), 1);
    redisReply *r = fcall("list", &q, -1, "pending", "100", "", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->element[1]->integer, 4);
    assert_int_equal(r->elements - 3, 4);
    int found = 0;
    for (size_t i = 3; i < r->elements; i++) {
        msg_t m;
        msg_parse(r->element[i], &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        if (m.id == a || m.id == s) assert_string_equal(msg_str(&m, "group"), "a");
        if (m.id == b) assert_string_equal(msg_str(&m, "group"), "b");
        if (m.id == u) assert_no_field(&m, "group");
        found += m.id == a || m.id == b || m.id == s || m.id == u;
    }
    freeReplyObject(r);
    assert_int_equal(found, 4);
    /* The whole listing too. */
    r = fcall("list", &q, -1, "", "100", "", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements - 3, 4);
    freeReplyObject(r);
    const char *formats[] = { "csv", "tsv", "jsonl" };
    for (size_t f = 0; f < 3; f++) {
        r = fcall("export", &q, -1, formats[f], "pending", "100", "", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 5);
        for (size_t i = 1; i < r->elements; i++)
            if (strstr(r->element[i]->str, "pending") == NULL)
                fail_msg("export %s: no status in \"%s\"", formats[f], r->element[i]->str);
        freeReplyObject(r);
    }
}


/* A queue that never had a grouped message has none of the groups' keys. */
static void test_no_groups_no_keys(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "nogroups");
    long long a = enqueue_group(&q, "a", "", 0, 0);
    enqueue_group(&q, "b", "", 5, 0);
    enqueue_group(&q, "c", "", 0, 60000);
    assert_int_equal(claim_n(&q, 60000, 10), 2);
    msg_t m = g_msgs[0];
    assert_string_equal(fail_msg_after(&q, &m, "1", 0), "pending");
    tick(&q);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    m = g_msgs[0];
    release_msg(&q, &m);
    expect_ok_msg(fcall("kill", &q, a, END), &m);
    expect_ok_msg(fcall("replay", &q, a, END), &m);
    drain(&q);
    redisReply *r = rcmd("HEXISTS", qkey(&q, "stats"), "groups_used", END);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_int_equal(stat_value(&q, "groups"), 0);
    assert_int_equal(keys_matching(&q, "3:g*") + keys_matching(&q, "3:rotat*"), 0);
}

/* The queue-wide limits apply on top of the groups: pause, max_in_flight,
 * the queue's rate limit. */
static void test_queue_limits_on_top(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "ontop");
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < 4; i++) enqueue_group(&q, "m", g == 0 ? "a" : g == 1 ? "b" : "c", 0, 0);
    int_reply(fcall("pause", &q, -1, "1", END));
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    int_reply(fcall("pause", &q, -1, "0", END));
    policy_set(&q, "merge", "max_in_flight", "2", "group_max_in_flight", "3");
    assert_int_equal(claim_n(&q, 60000, 10), 2);
    assert_string_equal(group_of(&g_msgs[0]), "a");
    assert_string_equal(group_of(&g_msgs[1]), "b");
    msg_t x = g_msgs[0], y = g_msgs[1];
    assert_int_equal(claim_n(&q, 60000, 10), 0);
    succeed_msg(&q, &x);
    assert_int_equal(claim_n(&q, 60000, 10), 1);
    assert_string_equal(group_of(&g_msgs[0]), "c");
    msg_t z = g_msgs[0];
    succeed_msg(&q, &y);
    succeed_msg(&q, &z);
    policy_set(&q, "merge", "max_in_flight", "0", "rate_limit.per_second", "5",
               "rate_limit.burst", "2");
    long long retry;
    assert_int_equal(claim_flow(&q, 10, &retry), 2);
    assert_int_equal(claim_flow(&q, 10, &retry), 0);
    assert_in_range(retry, 1, 200);
    expect_group(&q, "a", 2, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backlog_does_not_delay_other_groups),
        cmocka_unit_test(test_batch_goes_round),
        cmocka_unit_test(test_priority_inside_a_group),
        cmocka_unit_test(test_due_before_fresh_and_ungrouped_turn),
        cmocka_unit_test(test_ungrouped_backlog_before_first_group),
        cmocka_unit_test(test_ungrouped_turn_past_expired_ids),
        cmocka_unit_test(test_group_max_in_flight),
        cmocka_unit_test(test_group_rate_limit),
        cmocka_unit_test(test_fifo_groups),
        cmocka_unit_test(test_fifo_group_after_its_retry_leaves),
        cmocka_unit_test(test_fifo_delayed_message_keeps_its_place),
        cmocka_unit_test(test_loosened_policy_releases_held_groups),
        cmocka_unit_test(test_group_names_round_trip),
        cmocka_unit_test(test_claim_past_groups_that_cannot_serve),
        cmocka_unit_test(test_counts_follow_every_path),
        cmocka_unit_test(test_settle_claim_and_lost_claims),
        cmocka_unit_test(test_groups_paged),
        cmocka_unit_test(test_listing_export_stats),
        cmocka_unit_test(test_no_groups_no_keys),
        cmocka_unit_test(test_queue_limits_on_top),
    };
    return cmocka_run_group_tests_name(LUA_SUITE, tests, group_setup, NULL);
}
