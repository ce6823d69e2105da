/* test_lua_records.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: the record layout (docs/storage.md), orphans in the
 * indexes, walks under claims, and the byte budget of one reply.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_records"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Redis state                                                              */
/* ------------------------------------------------------------------------ */

/* One field of message id as `get` answers it, "" when it has none. */
static void get_field(const queue_t *q, long long id, const char *field, char *out, size_t size)
{
    redisReply *r = fcall("get", q, id, END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "ok");
    const redisReply *m = r->element[1];
    out[0] = '\0';
    for (size_t i = 2; i + 1 < m->elements; i += 2)
        if (strcmp(m->element[i]->str, field) == 0)
            snprintf(out, size, "%s", m->element[i + 1]->str);
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* Bounded work, orphans, walks under claims, reply bytes                   */
/* ------------------------------------------------------------------------ */

/* The byte budget of one reply (REPLY_BYTES in lua/00_common.lua). */
enum { REPLY_BYTES = 4 * 1024 * 1024 };

/* Orphans in the dead index (ids whose hash is gone: eviction, manual DEL):
 * replay_many removes and counts them and always makes progress. */
/* ------------------------------------------------------------------------ */
/* The record layout and the upgrade from retryd_v2's HASH (docs/storage.md) */
/* ------------------------------------------------------------------------ */

/* A pending 100-byte message is one STRING of 24 + 100 bytes; claim and
 * succeed change header bytes only (the length stays), and the key takes
 * well under half of the 624 bytes the HASH of retryd_v2 did. */
static void test_record_is_compact(void **state)
{
    queue_t q;
    queue_init(&q, "compact");
    char payload[101];
    memset(payload, 'p', 100);
    payload[100] = '\0';
    long long id = enqueue_ok(&q, payload, 3, 0);
    assert_string_equal(key_type(mkey(&q, id)), "string");
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    long long usage = int_reply(rcmd("MEMORY", "USAGE", mkey(&q, id), END));
    if (usage > 250)
        fail_msg("MEMORY USAGE of a pending 100-byte message: %lld bytes", usage);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    assert_string_equal(msg_str(&m, "payload"), payload);
}

/* Messages written by retryd_v2 (HASHes, status and all, in its indexes), in
 * every state, are read as they are by get, list and export, and each is
 * lifted into the new indexes, its record rewritten, by its next write
 * (succeed, fail, replay, claim, kill, delete), keeping its fields and lease. */
static void test_old_layout_is_read_and_converted(void **state)
{
    queue_t q;
    queue_init(&q, "legacy");
    const char *t = "1796000000000", *far = "4102444800000"; /* 2100-01-01 */
    /* 1 ready (with an idempotency key), 2 scheduled after a failure, 3 and 6
     * processing (6 with a token retryd never made), 4 succeeded, 5 dead,
     * 7 ready after its retry was promoted. */
    int_reply(rcmd("HSET", mkey(&q, 1), "payload", "one", "status", "pending", "retry_count", "0",
                   "max_retries", "3", "created_at", t, "updated_at", t, "idempotency_key", "k1",
                   END));
    int_reply(rcmd("HSET", mkey(&q, 2), "payload", "two", "status", "pending", "retry_count", "1",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "e2",
                   "retry_after", far, END));
    int_reply(rcmd("HSET", mkey(&q, 3), "payload", "three", "status", "processing",
                   "retry_count", "0", "max_retries", "3", "created_at", t, "updated_at", t,
                   "lease_token", "1a22f8c2400.7", "lease_expires_at", far, END));
    int_reply(rcmd("HSET", mkey(&q, 4), "payload", "four", "status", "succeeded",
                   "retry_count", "0", "max_retries", "3", "created_at", t, "updated_at", t, END));
    int_reply(rcmd("HSET", mkey(&q, 5), "payload", "five", "status", "dead", "retry_count", "3",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "boom",
                   "dead_at", t, END));
    int_reply(rcmd("HSET", mkey(&q, 6), "payload", "six", "status", "processing",
                   "retry_count", "2", "max_retries", "5", "created_at", t, "updated_at", t,
                   "last_error", "e6", "retry_after", t, "lease_token", "tok-6",
                   "lease_expires_at", far, END));
    int_reply(rcmd("HSET", mkey(&q, 7), "payload", "seven", "status", "pending", "retry_count", "1",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "e7",
                   "retry_after", t, END));
    int_reply(rcmd("LPUSH", qkey(&q, "ready"), "1", END));
    int_reply(rcmd("ZADD", qkey(&q, "scheduled"), far, "2", END));
    int_reply(rcmd("ZADD", qkey(&q, "processing"), far, "3", far, "6", END));
    int_reply(rcmd("ZADD", qkey(&q, "succeeded"), t, "4", END));
    int_reply(rcmd("ZADD", qkey(&q, "dead"), t, "5", END));
    int_reply(rcmd("LPUSH", qkey(&q, "due"), "7", END));
    freeReplyObject(rcmd("ZINCRBY", qkey(&q, "errors"), "1", "boom", END));
    freeReplyObject(rcmd("SET", qkey(&q, "seq"), "7", END));

    /* Reads: every field as retryd_v2 showed it; the hashes stay hashes. */
    static const char *const status[] = { "", "pending", "pending", "processing", "succeeded",
                                          "dead", "processing", "pending" };
    static const char *const payload[] = { "", "one", "two", "three", "four", "five", "six",
                                           "seven" };
    msg_t m;
    for (long long id = 1; id <= 7; id++) {
        expect_ok_msg(fcall("get", &q, id, END), &m);
        assert_string_equal(msg_str(&m, "status"), status[id]);
        assert_string_equal(msg_str(&m, "payload"), payload[id]);
        assert_string_equal(msg_str(&m, "created_at"), t);
        assert_string_equal(msg_str(&m, "updated_at"), t);
        assert_string_equal(key_type(mkey(&q, id)), "hash");
    }
    expect_ok_msg(fcall("get", &q, 1, END), &m);
    assert_string_equal(msg_str(&m, "idempotency_key"), "k1");
    assert_no_field(&m, "last_error");
    expect_ok_msg(fcall("get", &q, 2, END), &m);
    assert_string_equal(msg_str(&m, "last_error"), "e2");
    assert_string_equal(msg_str(&m, "retry_after"), far);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    expect_ok_msg(fcall("get", &q, 3, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), "1a22f8c2400.7");
    assert_string_equal(msg_str(&m, "lease_expires_at"), far);
    expect_ok_msg(fcall("get", &q, 5, END), &m);
    assert_string_equal(msg_str(&m, "dead_at"), t);
    assert_string_equal(msg_str(&m, "last_error"), "boom");
    expect_ok_msg(fcall("get", &q, 6, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), "tok-6");
    assert_int_equal(msg_int(&m, "max_retries"), 5);

    long long ids[16], bytes;
    char next[256];
    size_t n = raw_page(fcall("list", &q, -1, "", "100", "", END), ids, 16, &bytes, next,
                        sizeof next);
    assert_int_equal(n, 7);
    assert_string_equal(next, "");
    n = raw_export(fcall("export", &q, -1, "csv", "", "100", "", END), ids, 16, &bytes, next,
                   sizeof next);
    assert_int_equal(n, 7);
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    assert_int_equal(r->elements, 2);
    assert_non_null(strstr(r->element[1]->str, "5,dead,3,3,"));
    assert_non_null(strstr(r->element[1]->str, ",boom,five"));
    freeReplyObject(r);
    for (long long id = 1; id <= 7; id++)
        assert_string_equal(key_type(mkey(&q, id)), "hash");

    /* The old lease token still settles; a wrong one is refused. */
    expect_code(fcall("succeed", &q, 3, "1a22f8c2400.8", END), "lease_mismatch", NULL);
    assert_string_equal(key_type(mkey(&q, 3)), "hash");
    expect_ok_msg(fcall("succeed", &q, 3, "1a22f8c2400.7", END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "payload"), "three");
    assert_no_field(&m, "lease_token");
    assert_string_equal(key_type(mkey(&q, 3)), "string");
    expect_ok_msg(fcall("get", &q, 3, END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "created_at"), t);

    /* A token retryd never made is kept verbatim, and fails it. */
    expect_ok_msg(fcall("fail", &q, 6, "tok-6", "e6 again", "1", "0", END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 3);
    assert_string_equal(msg_str(&m, "last_error"), "e6 again");
    assert_string_equal(msg_str(&m, "payload"), "six");
    assert_string_equal(key_type(mkey(&q, 6)), "string");

    /* replay of the old dead letter: fresh budget, no error, top_errors updated. */
    expect_ok_msg(fcall("replay", &q, 5, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_no_field(&m, "last_error");
    assert_no_field(&m, "dead_at");
    assert_string_equal(key_type(mkey(&q, 5)), "string");
    assert_int_equal(zcard(qkey(&q, "errors")), 0);

    /* claim: the new due list first (5 replayed, 6 due now), then
     * retryd_v2's due (7) and ready (1). */
    msg_t c[8];
    n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "8", END), c, 8);
    assert_int_equal(n, 4);
    static const long long order[] = { 5, 6, 7, 1 };
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(c[i].id, order[i]);
        assert_string_equal(msg_str(&c[i], "payload"), payload[order[i]]);
        assert_string_equal(msg_str(&c[i], "status"), "processing");
        assert_string_equal(key_type(mkey(&q, order[i])), "string");
        expect_ok_msg(fcall("get", &q, order[i], END), &m);
        assert_string_equal(msg_str(&m, "lease_token"), msg_str(&c[i], "lease_token"));
    }
    assert_string_equal(msg_str(&c[3], "idempotency_key"), "k1");
    assert_string_equal(msg_str(&c[2], "last_error"), "e7");
    assert_string_equal(msg_str(&c[2], "retry_after"), t);
    assert_string_not_equal(msg_str(&c[1], "lease_token"), "tok-6");
    expect_ok_msg(fcall("succeed", &q, 1, msg_str(&c[3], "lease_token"), END), &m);

    /* kill of the old scheduled one, delete of the old succeeded one. */
    expect_ok_msg(fcall("kill", &q, 2, "by hand", END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "payload"), "two");
    assert_no_field(&m, "retry_after");
    assert_string_equal(key_type(mkey(&q, 2)), "string");
    expect_code(fcall("delete", &q, 4, END), "ok", NULL);
    assert_int_equal(exists(mkey(&q, 4)), 0);
    assert_int_equal(zcard(qkey(&q, "3:succeeded")), 2);
    assert_int_equal(zcard(qkey(&q, "succeeded")), 0);
    assert_generations_apart(&q);
}

static void test_replay_many_orphans(void **state)
{
    queue_t q;
    queue_init(&q, "orphans");
    long long ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = make_dead(&q, i % 2 ? "boom" : "bang");
    for (int i = 0; i < 5; i++)     /* the five oldest lose their hash */
        int_reply(rcmd("DEL", mkey(&q, ids[i]), END));

    for (int mode = 0; mode < 2; mode++) {
        char cursor[128] = "";
        long long replayed = 0;
        int calls = 0;
        for (;;) {
            redisReply *r = mode == 0 ? fcall("replay_many", &q, -1, "error", "2", cursor, "boom", END)
                                      : fcall("replay_many", &q, -1, "all", "2", cursor, END);
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING)
                fail_msg("replay_many: %s", reply_desc(r));
            long long n = r->element[0]->integer;
            char next[128];
            snprintf(next, sizeof next, "%s", r->element[1]->str);
            freeReplyObject(r);
            replayed += n;
            calls++;
            if (next[0] == '\0')
                break;
            if (n == 0 && strcmp(next, cursor) == 0)
                fail_msg("replay_many %s made no progress at cursor %s after %d calls",
                         mode ? "all" : "error", next, calls);
            if (calls > 20)
                fail_msg("replay_many %s did not end", mode ? "all" : "error");
            snprintf(cursor, sizeof cursor, "%s", next);
        }
        /* error "boom": odd ones that still have a hash (5, 7); all: the rest (6). */
        assert_int_equal(replayed, mode == 0 ? 2 : 1);
    }
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "orphans_removed"), 5);
    assert_int_equal(counter(&q, "replayed"), 3);
    assert_int_equal(llen(qkey(&q, "3:due")), 3);

    /* purge and replay by ids pass orphans over the same way. */
    long long more = enqueue_ok(&q, "x", 3, 0);
    msg_t m;
    expect_ok_msg(fcall("kill", &q, more, "x", END), &m);
    int_reply(rcmd("ZADD", qkey(&q, "3:dead"), "1", "424242", END));
    long long pr[2];
    expect_ints(fcall("purge", &q, -1, "0", "10", END), 2, pr);
    assert_int_equal(pr[0], 1);
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "purged"), 1);
    assert_int_equal(counter(&q, "orphans_removed"), 6);
    int_reply(rcmd("ZADD", qkey(&q, "3:dead"), "1", "434343", END));
    redisReply *r = fcall("replay_many", &q, -1, "ids", "434343", num(more), END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 0);
    freeReplyObject(r);
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "orphans_removed"), 7);
}

/* Walks a pending (or complete) listing, or its export, with pages of 4
 * while workers claim 3 between pages (and dead letters are replayed and a
 * claim is released): every message that stayed pending during the whole
 * walk is listed. */
static void walk_under_claims(bool export, const char *status)
{
    enum { DEAD = 16, FRESH = 40, SCHEDULED = 3, MAX_ID = 64 };
    queue_t q;
    queue_init(&q, export ? "walkexport" : "walklist");
    long long dead[DEAD];
    for (int i = 0; i < DEAD; i++)
        dead[i] = make_dead(&q, "e");
    msg_t m;
    for (int i = 0; i < DEAD / 2; i++)     /* three in due */
        expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
    for (int i = 0; i < FRESH; i++)
        enqueue_ok(&q, "job", 3, 0);
    for (int i = 0; i < SCHEDULED; i++)
        enqueue_ok(&q, "later", 3, 600000 + i);
    long long max_id = DEAD + FRESH + SCHEDULED;

    bool was_pending[MAX_ID] = { false }, claimed[MAX_ID] = { false };
    int seen[MAX_ID] = { 0 };
    for (int i = DEAD + 1; i <= max_id; i++)
        was_pending[i] = true;
    for (int i = 0; i < DEAD / 2; i++)
        was_pending[dead[i]] = true;

    char cursor[256] = "", next[256];
    for (int page = 0; page < 200; page++) {
        long long ids[4], bytes;
        size_t n = export ? raw_export(fcall("export", &q, -1, "tsv", status, "4", cursor, END),
                                       ids, 4, &bytes, next, sizeof next)
                          : raw_page(fcall("list", &q, -1, status, "4", cursor, END), ids, 4,
                                     &bytes, next, sizeof next);
        for (size_t i = 0; i < n; i++) {
            assert_in_range(ids[i], 1, MAX_ID - 1);
            seen[ids[i]]++;
        }
        if (next[0] == '\0')
            break;
        snprintf(cursor, sizeof cursor, "%s", next);
        /* Workers take three (due first, then ready). */
        msg_t c[3];
        size_t got = expect_ok_msgs(fcall("claim", &q, -1, "600000", "3", END), c, 3);
        for (size_t i = 0; i < got; i++)
            claimed[c[i].id] = true;
        if (page == 1) {     /* more arrive in due: replays push on the far side */
            for (int i = DEAD / 2; i < DEAD; i++)
                expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
        }
        if (page == 2 && got > 0) { /* a claim handed back: it lands at the claim end */
            char t[64];
            snprintf(t, sizeof t, "%.63s", msg_str(&c[0], "lease_token"));
            assert_int_equal(int_reply(fcall("release", &q, -1, num(c[0].id), t, END)), 1);
        }
    }
    assert_string_equal(next, "");
    for (int id = 1; id <= max_id; id++) {
        if (was_pending[id] && !claimed[id] && seen[id] == 0)
            fail_msg("%s %s: message %d stayed pending during the walk but was not listed",
                     export ? "export" : "list", status[0] ? status : "(all)", id);
    }
}

static void test_pending_walk_under_claims(void **state)
{
    walk_under_claims(false, "pending");
    walk_under_claims(false, "");
    walk_under_claims(true, "pending");
    walk_under_claims(true, "");
}

/* A random priority for the walks with priorities: 0 half the time. */
static int random_priority(bool priorities)
{
    return priorities && rand() % 2 ? 1 + rand() % 9 : 0;
}

/* One message enqueued (with a random priority when priorities), then
 * failed once without retry: a dead letter. */
static long long make_dead_random(const queue_t *q, bool priorities)
{
    if (!priorities)
        return make_dead(q, "e");
    msg_t m;
    long long id = enqueue_with(q, "x", 0, -1, random_priority(true), NULL);
    claim_one(q, 600000, &m);
    assert_int_equal(m.id, id);
    fail_ok(q, id, "e", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    return id;
}

/* The same property under a random mix of claims, releases, replays,
 * promotions, deletes and enqueues between pages, for several seeds. With
 * priorities, messages of priority 1-9 are in the lane (docs/lifecycle.md
 * "Priority"), listed first and again at the end (lanelater), and a
 * promotion makes a scheduled id due at Redis's time (as time passing would:
 * a due time is never earlier than the id's scheduling). */
static void random_walks(bool priorities)
{
    enum { MAX_ID = 400 };
    for (unsigned seed = 1; seed <= 24; seed++) {
        srand(seed + (priorities ? 1000u : 0u));
        const char *status = seed % 3 == 0 ? "" : "pending";
        bool export = seed % 2 == 0;
        int limit = 1 + (int)(seed % 5);
        queue_t q;
        queue_init(&q, priorities ? "walkprio" : "walkrandom");
        long long dead[40];
        int ndead = 0;
        for (int i = 0; i < 30; i++)
            dead[ndead++] = make_dead_random(&q, priorities);
        msg_t m;
        for (int i = 0; i < 12; i++)
            expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
        for (int i = 0; i < 60; i++)
            enqueue_with(&q, "job", i % 7 == 0 ? 600000 : 0, -1, random_priority(priorities), NULL);
        long long max_id = 90;
        bool stayed[MAX_ID] = { false };
        int seen[MAX_ID] = { 0 };
        for (long long id = 31; id <= max_id; id++)
            stayed[id] = true;
        for (int i = 0; i < 12; i++)
            stayed[dead[i]] = true;
        long long held[100];
        char tokens[100][64];
        int nheld = 0, next_dead = 12;

        char cursor[256] = "", next[256];
        int page;
        for (page = 0; page < 1000; page++) {
            long long ids[8], bytes;
            redisReply *page_reply = export
                ? fcall("export", &q, -1, "tsv", status, num(limit), cursor, END)
                : fcall("list", &q, -1, status, num(limit), cursor, END);
            size_t n = export ? raw_export(page_reply, ids, 8, &bytes, next, sizeof next)
                              : raw_page(page_reply, ids, 8, &bytes, next, sizeof next);
            for (size_t i = 0; i < n; i++) {
                assert_in_range(ids[i], 1, MAX_ID - 1);
                seen[ids[i]]++;
            }
            if (next[0] == '\0')
                break;
            snprintf(cursor, sizeof cursor, "%s", next);
            int ops = rand() % 4;
            for (int o = 0; o < ops; o++) {
                int what = rand() % 7;
                if (what <= 1) {          /* claim 1..3 */
                    msg_t c[3];
                    redisReply *r = fcall("claim", &q, -1, "600000", num(1 + rand() % 3), END);
                    size_t got = expect_ok_msgs(r, c, 3);
                    for (size_t i = 0; i < got; i++) {
                        stayed[c[i].id] = false;
                        if (nheld < 100) {
                            held[nheld] = c[i].id;
                            snprintf(tokens[nheld++], 64, "%.63s", msg_str(&c[i], "lease_token"));
                        }
                    }
                } else if (what == 2 && nheld > 0) {   /* release one */
                    nheld--;
                    int_reply(fcall("release", &q, -1, num(held[nheld]), tokens[nheld], END));
                } else if (what == 3 && next_dead < ndead) {   /* replay: far end of due */
                    freeReplyObject(fcall("replay", &q, dead[next_dead++], END)); /* maybe deleted */
                } else if (what == 4 && max_id + 1 < MAX_ID) {  /* enqueue */
                    int prio = random_priority(priorities);
                    max_id = enqueue_with(&q, "job", rand() % 2 ? 0 : 600000, -1, prio, NULL);
                } else if (what == 5) {   /* delete a random pending one (LREM) */
                    long long id = 1 + rand() % max_id;
                    redisReply *r = fcall("delete", &q, id, END);
                    if (has_code(r, "ok"))
                        stayed[id] = false;
                    freeReplyObject(r);
                } else if (what == 6) {   /* scheduled ones become due and are promoted */
                    redisReply *r = rcmd("ZRANGE", qkey(&q, "3:scheduled"), "0", "1", END);
                    const char *due = priorities ? num(redis_now_ms()) : "0";
                    for (size_t i = 0; i < r->elements; i++)
                        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", due,
                                       r->element[i]->str, END));
                    freeReplyObject(r);
                    long long pr[2];
                    expect_ints(fcall("promote", &q, -1, "100", END), 2, pr);
                }
            }
        }
        assert_true(page < 1000);
        for (long long id = 1; id <= max_id; id++)
            if (stayed[id] && seen[id] == 0)
                fail_msg("seed %u (%s %s, limit %d%s): message %lld stayed pending but was not "
                         "listed", seed, export ? "export" : "list", status[0] ? status : "(all)",
                         limit, priorities ? ", priorities" : "", id);
        if (priorities)
            assert_int_equal(counter(&q, "priorities"), 1);
    }
}

static void test_pending_walk_random_interleaving(void **state)
{
    random_walks(false);
}

static void test_pending_walk_random_interleaving_with_priorities(void **state)
{
    random_walks(true);
}

/* Listing pages, export chunks and batch claims stop at REPLY_BYTES of
 * messages (always at least one); what a claim does not return stays
 * pending, untouched. */
static void test_reply_bytes_bounded(void **state)
{
    enum { N = 10, MIB = 1024 * 1024 };
    queue_t q;
    queue_init(&q, "bigpayload");
    char *payload = malloc(5 * MIB);
    assert_non_null(payload);
    memset(payload, 'x', 5 * MIB);
    for (int i = 0; i < N; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { MIB, 1, 1 };
        redisReply *r = fcall_bin("enqueue", &q, -1, 3, args, lens);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }

    static const char *const statuses[] = { "", "pending" };
    for (size_t s = 0; s < 2; s++) {
        char cursor[256] = "", next[256];
        int listed = 0, pages = 0;
        do {
            long long ids[1000], bytes;
            size_t n = raw_page(fcall("list", &q, -1, statuses[s], "1000", cursor, END), ids,
                                1000, &bytes, next, sizeof next);
            assert_true(n >= 1);
            if (n > 1 && bytes > REPLY_BYTES)
                fail_msg("a list page of %zu messages holds %lld bytes", n, bytes);
            listed += (int)n;
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 20);
        assert_int_equal(listed, N);
        assert_true(pages >= 2);

        listed = pages = 0;
        cursor[0] = '\0';
        do {
            long long ids[1000], bytes;
            size_t n = raw_export(fcall("export", &q, -1, "jsonl", statuses[s], "1000", cursor, END),
                                  ids, 1000, &bytes, next, sizeof next);
            assert_true(n >= 1);
            if (n > 1 && bytes > REPLY_BYTES)
                fail_msg("an export chunk of %zu lines holds %lld bytes", n, bytes);
            listed += (int)n;
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 20);
        assert_int_equal(listed, N);
    }

    /* A batch claim of all ten returns fewer; the rest stay pending as they were. */
    redisReply *r = fcall("claim", &q, -1, "600000", "10", END);
    assert_true(has_code(r, "ok"));
    size_t got = r->elements - 1;
    long long bytes = 0;
    for (size_t i = 1; i < r->elements; i++)
        for (size_t j = 2; j < r->element[i]->elements; j++)
            bytes += (long long)r->element[i]->element[j]->len;
    freeReplyObject(r);
    if (got < 1 || got >= N || (got > 1 && bytes > REPLY_BYTES))
        fail_msg("claim of 10 returned %zu messages, %lld bytes", got, bytes);
    assert_int_equal(counter(&q, "claimed"), (long long)got);
    assert_int_equal(zcard(qkey(&q, "3:processing")), (long long)got);
    assert_int_equal(llen(qkey(&q, "3:ready")), N - (long long)got);
    for (long long id = (long long)got + 1; id <= N; id++) {
        char status[32], token[64];
        get_field(&q, id, "status", status, sizeof status);
        get_field(&q, id, "lease_token", token, sizeof token);
        assert_string_equal(status, "pending");
        assert_string_equal(token, "");
    }
    /* Claim order is kept: the next claim takes the next id. */
    r = fcall("claim", &q, -1, "600000", "1", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 2);
    assert_int_equal(parse_int(r->element[1]->element[0]->str, r->element[1]->element[0]->len, "id"),
                     (long long)got + 1);
    freeReplyObject(r);

    /* One message above the budget still comes, alone. */
    queue_t big;
    queue_init(&big, "hugepayload");
    for (int i = 0; i < 2; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { 5 * MIB, 1, 1 };
        redisReply *e = fcall_bin("enqueue", &big, -1, 3, args, lens);
        assert_true(has_code(e, "ok"));
        freeReplyObject(e);
    }
    free(payload);
    long long ids[4];
    char next[256];
    assert_int_equal(raw_page(fcall("list", &big, -1, "", "1000", "", END), ids, 4, &bytes, next,
                              sizeof next), 1);
    assert_string_not_equal(next, "");
    r = fcall("claim", &big, -1, "600000", "2", END);
    assert_int_equal(r->elements, 2);
    freeReplyObject(r);
}

/* settle_claim's claim is claim's: bounded by REPLY_BYTES of messages too,
 * the rest left pending in place. */
static void test_settle_claim_reply_bytes_bounded(void **state)
{
    enum { N = 6, MIB = 1024 * 1024 };
    queue_t q;
    queue_init(&q, "settlebig");
    char *payload = malloc(MIB);
    assert_non_null(payload);
    memset(payload, 'y', MIB);
    for (int i = 0; i < N; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { MIB, 1, 1 };
        redisReply *r = fcall_bin("enqueue", &q, -1, 3, args, lens);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }
    free(payload);
    redisReply *c = fcall("claim", &q, -1, "60000", "1", END);
    assert_int_equal(c->elements, 2);
    freeReplyObject(c);
    settle_t done = SUCCEEDED(1, "");
    redisReply *r = settle_claim(&q, 60000, N, 1, &done);
    assert_true(has_code(r, "ok"));
    assert_string_equal(r->element[1]->element[0]->str, "succeeded");
    size_t got = r->elements - 2;
    long long bytes = 0;
    for (size_t i = 2; i < r->elements; i++)
        for (size_t k = 2; k < r->element[i]->elements; k++)
            bytes += (long long)r->element[i]->element[k]->len;
    freeReplyObject(r);
    if (got < 1 || got >= N - 1 || (got > 1 && bytes > REPLY_BYTES))
        fail_msg("settle_claim of %d returned %zu messages, %lld bytes", N, got, bytes);
    assert_int_equal(zcard(qkey(&q, "3:processing")), (long long)got);
    assert_int_equal(llen(qkey(&q, "3:ready")), N - 1 - (long long)got);
    assert_int_equal(counter(&q, "claimed"), 1 + (long long)got);
}

/* A batch claim that stops at REPLY_BYTES gives the lane's ids it does not
 * take back with their scores: the lane's order is as before, and the next
 * claim takes the next one (docs/lifecycle.md "Priority"). */
static void test_priority_budget_give_back(void **state)
{
    enum { N = 10, MIB = 1024 * 1024 };
    queue_t q;
    queue_init(&q, "priobig");
    char *payload = malloc(MIB);
    assert_non_null(payload);
    memset(payload, 'z', MIB);
    for (int i = 0; i < N; i++) {
        const char *args[] = { payload, "3", "0", "", "", "", "", num(1 + i % 4) };
        const size_t lens[] = { MIB, 1, 1, 0, 0, 0, 0, 1 };
        redisReply *r = fcall_bin("enqueue", &q, -1, 8, args, lens);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }
    free(payload);
    /* The lane's order before: ids and scores, best first. */
    redisReply *before = rcmd("ZRANGE", qkey(&q, "3:priority"), "0", "-1", "WITHSCORES", END);
    assert_int_equal(before->elements, 2 * N);

    redisReply *r = fcall("claim", &q, -1, "600000", "10", END);
    assert_true(has_code(r, "ok"));
    size_t got = r->elements - 1;
    if (got < 1 || got >= N)
        fail_msg("claim of 10 returned %zu of 1 MiB each", got);
    for (size_t i = 0; i < got; i++) {
        const redisReply *id = r->element[1 + i]->element[0];
        assert_int_equal(int_or_text(id, "id"), atoll(before->element[2 * i]->str));
    }
    freeReplyObject(r);
    redisReply *after = rcmd("ZRANGE", qkey(&q, "3:priority"), "0", "-1", "WITHSCORES", END);
    assert_int_equal(after->elements, 2 * (N - got));
    for (size_t i = 0; i < after->elements; i++)
        assert_string_equal(after->element[i]->str, before->element[2 * got + i]->str);
    freeReplyObject(after);

    r = fcall("claim", &q, -1, "600000", "1", END);
    assert_int_equal(r->elements, 2);
    assert_int_equal(int_or_text(r->element[1]->element[0], "id"),
                     atoll(before->element[2 * got]->str));
    freeReplyObject(r);
    freeReplyObject(before);
}

/* A retryd_v6 instance beside this library (a rolling upgrade) reads a
 * record with this release's trailer fields (attributes, first receive):
 * get, claim and settle answer as usual; a claim by v6 keeps them (it
 * writes the header only); a write of the whole record by v6 (its failure)
 * keeps what v6 knows and drops the rest (docs/storage.md). */
static void test_sqs_fields_read_by_retryd_v6(void **state)
{
    (void)state;
    size_t len = 0;
    char *code = read_file("tests/fixtures/retryd_v6.lua", &len);
    if (code == NULL) fail_msg("cannot read tests/fixtures/retryd_v6.lua (run from the source tree)");
    load_library(code, len, true, "retryd_v6");
    free(code);

    queue_t q;
    queue_init(&q, "sqsv6");
    const char *args[] = { "job", "3", "0", "", "1", "default", "", "", "", "ATTR\x01", "300000", "f" };
    redisReply *e = fcall_bin("enqueue", &q, -1, 12, args, NULL);
    if (!has_code(e, "ok")) fail_msg("enqueue: %s", reply_desc(e));
    long long id = e->element[1]->integer;
    freeReplyObject(e);

    /* v6 claims it first: its lease writes the header only, the trailer stays. */
    const char *claim_args[] = { "30000", "1" };
    redisReply *r = fcall_lib("retryd_v6_", "claim", &q, -1, 2, claim_args, NULL);
    if (!has_code(r, "ok") || r->elements != 2) fail_msg("retryd_v6_claim: %s", reply_desc(r));
    msg_t m;
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "payload"), "job");
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "attributes"), "ATTR\x01");
    /* v6 does not know flag f, but its claim wrote the lease time that is
     * the first receive while f is 0 (docs/storage.md). */
    long long v6_claimed = msg_int(&m, "updated_at");
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "first_received_at"), v6_claimed);

    /* v6 fails it (retryable, due at once), this release claims it. */
    const char *fail_args[] = { "", "boom", "1", "0" };
    r = fcall_lib("retryd_v6_", "fail", &q, id, 4, fail_args, NULL);
    if (!has_code(r, "ok")) fail_msg("retryd_v6_fail: %s", reply_desc(r));
    freeReplyObject(r);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "last_error"), "boom");
    /* v6's failure rewrote the record with the fields it knows. */
    assert_no_field(&m, "attributes");
    assert_no_field(&m, "first_received_at");

    /* v6 reads the record with both fields, and settles it. */
    r = fcall_lib("retryd_v6_", "get", &q, id, 0, NULL, NULL);
    if (!has_code(r, "ok") || r->elements != 2) fail_msg("retryd_v6_get: %s", reply_desc(r));
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_string_equal(msg_str(&m, "status"), "processing");
    const char *succeed_args[] = { "" };
    r = fcall_lib("retryd_v6_", "succeed", &q, id, 1, succeed_args, NULL);
    if (!has_code(r, "ok")) fail_msg("retryd_v6_succeed: %s", reply_desc(r));
    freeReplyObject(r);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    freeReplyObject(rcmd("FUNCTION", "DELETE", "retryd_v6", END));
}

/* max_retries "unlimited" (every SQS queue's) is the header byte 255 with no
 * trailer: the record of a plain message on such a queue has none, so claim
 * and settle keep their fast paths, and it reads back as -1 (not 255) through
 * the header-only read of a settlement too: failed 300 times, it is never
 * dead. A max_retries of exactly 255 or past it is kept in the trailer and
 * reads back exactly. */
static void test_unlimited_max_retries_needs_no_trailer(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "unlimhdr");
    policy_set(&q, "replace", "max_retries", "unlimited");
    redisReply *e = fcall("enqueue", &q, -1, "job", "3", "0", "", "", "default", END);
    if (!has_code(e, "ok") || e->elements < 2) fail_msg("enqueue: %s", reply_desc(e));
    long long id = e->element[1]->integer;
    freeReplyObject(e);
    redisReply *b = rcmd("GETRANGE", mkey(&q, id), "0", "2", END);
    assert_int_equal(b->len, 3);
    assert_true((unsigned char)b->str[0] < 0x80);     /* no trailer */
    assert_int_equal((unsigned char)b->str[2], 255);
    freeReplyObject(b);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "max_retries"), -1);
    for (int i = 0; i < 300; i++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        assert_int_equal(msg_int(&m, "max_retries"), -1);
        fail_ok(&q, id, "again", "1", 0, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
    }
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "retry_count"), 300);
    assert_int_equal(msg_int(&m, "max_retries"), -1);

    const char *exact[] = { "255", "300", "254" };
    for (int i = 0; i < 3; i++) {
        queue_t w;
        char name[32];
        snprintf(name, sizeof name, "unlimhdr%s", exact[i]);
        queue_init(&w, name);
        policy_set(&w, "replace", "max_retries", exact[i]);
        e = fcall("enqueue", &w, -1, "job", "3", "0", "", "", "default", END);
        if (!has_code(e, "ok") || e->elements < 2) fail_msg("enqueue: %s", reply_desc(e));
        long long wid = e->element[1]->integer;
        freeReplyObject(e);
        expect_ok_msg(fcall("get", &w, wid, END), &m);
        assert_int_equal(msg_int(&m, "max_retries"), atoll(exact[i]));
        claim_one(&w, 30000, &m);
        assert_int_equal(msg_int(&m, "max_retries"), atoll(exact[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_many_orphans),
        cmocka_unit_test(test_old_layout_is_read_and_converted),
        cmocka_unit_test(test_record_is_compact),
        cmocka_unit_test(test_pending_walk_under_claims),
        cmocka_unit_test(test_pending_walk_random_interleaving),
        cmocka_unit_test(test_pending_walk_random_interleaving_with_priorities),
        cmocka_unit_test(test_reply_bytes_bounded),
        cmocka_unit_test(test_settle_claim_reply_bytes_bounded),
        cmocka_unit_test(test_priority_budget_give_back),
        cmocka_unit_test(test_sqs_fields_read_by_retryd_v6),
        cmocka_unit_test(test_unlimited_max_retries_needs_no_trailer),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
