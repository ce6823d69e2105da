/* test_lua_history.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: the history of attempts (docs/reference.md "History")
 * and the time series (lua/05_series.lua, docs/series.md).
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_history"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Time series (lua/05_series.lua, docs/series.md)                          */
/* ------------------------------------------------------------------------ */

enum { SERIES_MINUTES = 120, SERIES_HOURS = 192, SERIES_HEADER = 48, SERIES_BUCKET = 20 };

/* One resolution of the series: start, step and the five series. */
typedef struct {
    long long start, step;
    size_t len;
    long long v[5][SERIES_HOURS];   /* enqueued, succeeded, failed, dead, replayed */
} series_t;

static void series_read(const queue_t *q, const char *resolution, series_t *s)
{
    redisReply *r = fcall("series", q, -1, resolution, END);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("series: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 7);
    s->start = r->element[0]->integer;
    s->step = r->element[1]->integer;
    s->len = r->element[2]->elements;
    assert_true(s->len <= SERIES_HOURS);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(r->element[2 + i]->elements, s->len);
        for (size_t j = 0; j < s->len; j++) s->v[i][j] = r->element[2 + i]->element[j]->integer;
    }
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* Redrive to another queue (lua/65_redrive.lua, docs/dead-letters.md §4)   */
/* ------------------------------------------------------------------------ */

static long long series_sum(const series_t *s, int i)
{
    long long n = 0;
    for (size_t j = 0; j < s->len; j++) n += s->v[i][j];
    return n;
}

/* Writes the series header: last sample at `at`, with these counters. */
static void series_header(const queue_t *q, long long at, const double c[5])
{
    unsigned char h[SERIES_HEADER];
    double d[6] = { (double)at, c[0], c[1], c[2], c[3], c[4] };
    memcpy(h, d, sizeof h);     /* '<d': the test host is little-endian like Redis' */
    const char *argv[] = { "SETRANGE", qkey(q, "series"), "0", (const char *)h };
    size_t lens[] = { 8, strlen(argv[1]), 1, sizeof h };
    freeReplyObject(command_argv(4, argv, lens));
}

static void test_series_counts_the_lifecycle(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "series");
    long long t0 = redis_now_ms();
    msg_t m;
    long long dead = make_dead(&q, "boom");     /* enqueued, failed, dead */
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    for (int i = 0; i < 3; i++) enqueue_ok(&q, "x", 3, 0);
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);

    series_t s;
    series_read(&q, "minute", &s);
    long long t1 = redis_now_ms();
    assert_int_equal(s.len, SERIES_MINUTES);
    assert_int_equal(s.step, 60000);
    assert_int_equal(s.start, (t1 / 60000 - SERIES_MINUTES + 1) * 60000);
    long long want[5] = { 4, 1, 1, 1, 1 };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(series_sum(&s, i), want[i]);
        /* All in the current minute, or the one before if one began meanwhile. */
        long long recent = s.v[i][SERIES_MINUTES - 1];
        if (t0 / 60000 != t1 / 60000) recent += s.v[i][SERIES_MINUTES - 2];
        assert_int_equal(recent, want[i]);
    }
    series_read(&q, "hour", &s);
    assert_int_equal(s.len, SERIES_HOURS);
    assert_int_equal(s.step, 3600000);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), want[i]);

    /* Read again: nothing counted twice. */
    series_read(&q, "minute", &s);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), want[i]);

    /* A queue that does not exist: zeros, and no key made for it. */
    queue_t none;
    queue_init(&none, "seriesnone");
    series_read(&none, "hour", &s);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), 0);
    assert_int_equal(exists(qkey(&none, "series")), 0);

    expect_error(fcall("series", &q, -1, "day", END));
    expect_error(fcall("series", &q, -1, END));
    /* Bounded: one key of fixed size, with a TTL. */
    assert_int_equal(int_reply(rcmd("STRLEN", qkey(&q, "series"), END)),
                     SERIES_HEADER + (SERIES_MINUTES + SERIES_HOURS) * SERIES_BUCKET);
    assert_true(int_reply(rcmd("PTTL", qkey(&q, "series"), END)) > 192LL * 3600000);
}

/* A sample 5 minutes after the last: the 4 slots it moves past held data
 * of 2 hours ago (the ring wrapped): they read 0, the older ones keep
 * theirs. Deltas over 150 minutes spread evenly; those before the window
 * are not shown. The clock is faked by writing the last sample's header. */
static void test_series_ring_wrap_and_spread(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "serieswrap");
    enqueue_ok(&q, "x", 3, 0);
    series_t s;
    series_read(&q, "minute", &s);    /* sampled: the header holds enqueued = 1 */
    /* Every bucket of both rings holds 0x01010101 of every series. */
    char fill[(SERIES_MINUTES + SERIES_HOURS) * SERIES_BUCKET];
    memset(fill, 1, sizeof fill);
    const char *argv[] = { "SETRANGE", qkey(&q, "series"), "48", fill };
    size_t lens[] = { 8, strlen(argv[1]), 2, sizeof fill };
    freeReplyObject(command_argv(4, argv, lens));
    const long long old = 0x01010101;

    long long now = redis_now_ms();
    double c[5] = { 1, 0, 0, 0, 0 };
    series_header(&q, now - 5 * 60000, c);
    series_read(&q, "minute", &s);
    long long t = redis_now_ms();
    /* The buckets after the last sample's read 0; it and the older keep theirs. */
    long long moved = t / 60000 - (now - 5 * 60000) / 60000;
    assert_in_range(moved, 5, 6);
    for (size_t j = 0; j < SERIES_MINUTES; j++) {
        long long want = j >= SERIES_MINUTES - (size_t)moved ? 0 : old;
        for (int i = 0; i < 5; i++) assert_int_equal(s.v[i][j], want);
    }

    /* 300 enqueued over the last 150 minutes: 2 a minute in every full
     * minute of the window; the 30 minutes before it are not shown. */
    int_reply(rcmd("HSET", qkey(&q, "stats"), "enqueued", "301", END));
    now = redis_now_ms();
    series_header(&q, now - 150 * 60000, c);
    series_read(&q, "minute", &s);
    long long shown = series_sum(&s, 0);
    for (size_t j = 0; j + 1 < SERIES_MINUTES; j++) assert_in_range(s.v[0][j], 1, 3);
    assert_in_range(shown, 236, 242);     /* about 300 * 120 / 150 */
    for (int i = 1; i < 5; i++) assert_int_equal(series_sum(&s, i), 0);
    /* The hour ring has all 300 (150 minutes is 3 or 4 hours of it), and its
     * older buckets kept their old counts. */
    series_read(&q, "hour", &s);
    long long fresh = 0;
    for (size_t j = SERIES_HOURS - 4; j < SERIES_HOURS; j++)
        if (s.v[0][j] < old) fresh += s.v[0][j];
        else fresh += s.v[0][j] - old;
    assert_int_equal(fresh, 300);
    assert_int_equal(s.v[0][0], old);

    /* A counter that went down (the stats hash deleted) counts nothing. */
    int_reply(rcmd("HSET", qkey(&q, "stats"), "enqueued", "7", END));
    series_t before;
    series_read(&q, "hour", &before);
    assert_memory_equal(before.v, s.v, sizeof s.v);
}

/* tick samples; a tick that saw activity asks for the next within a minute,
 * the next that saw none asks for nothing (docs/reference.md "Cost follows work": idle costs nothing);
 * ARGV[5] "0" samples nothing. */
static void test_series_tick_samples_then_idle(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "seriestick");
    enqueue_ok(&q, "x", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);
    long long r[TICK_ROUND_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_in_range(r[3], 0, 60000);    /* activity: sample again within a minute */
    redisReply *h = rcmd("GETRANGE", qkey(&q, "series"), "0", "47", END);
    assert_int_equal(h->len, SERIES_HEADER);
    double hdr[6];
    memcpy(hdr, h->str, sizeof hdr);
    freeReplyObject(h);
    assert_true(hdr[1] == 1 && hdr[2] == 1);    /* enqueued 1, succeeded 1 sampled */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_int_equal(r[3], -1);         /* idle: no more timer visits */
    assert_int_equal(exists(qkey(&q, "timer")), 0);

    /* Without sampling, a tick leaves the series alone. */
    enqueue_ok(&q, "y", 3, 0);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "0", "0", END), TICK_ROUND_N, r);
    assert_int_equal(r[3], -1);
    h = rcmd("GETRANGE", qkey(&q, "series"), "0", "47", END);
    memcpy(hdr, h->str, sizeof hdr);
    freeReplyObject(h);
    assert_true(hdr[1] == 1);
    series_t s;
    series_read(&q, "minute", &s);
    assert_int_equal(series_sum(&s, 0), 2);
}

/* ------------------------------------------------------------------------ */
/* History of attempts and the claim's worker (docs/reference.md "History")                    */
/* ------------------------------------------------------------------------ */

/* The message's history as history_text writes it ("" when it has none). */
static const char *history_of(const queue_t *q, long long id, msg_t *m)
{
    expect_ok_msg(fcall("get", q, id, END), m);
    const field_t *f = msg_field(m, "history");
    return f ? f->value : "";
}

/* {"ok", {status?}, message, timer} of a settle_claim that asked for hints,
 * with zero settlements (status NULL) or one: the claimed message into m. */
static void expect_settled_one(redisReply *r, const char *status, msg_t *m)
{
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[1]->elements, status ? 1 : 0);
    if (status) assert_string_equal(r->element[1]->element[0]->str, status);
    msg_parse(r->element[2], m);
    freeReplyObject(r);
}

/* Every kind of failure appends {attempt, error, at, lease_expired, worker}
 * and every replay a mark; the worker is shown while processing only. */
static void test_history_every_failure_kind(void **state)
{
    queue_t q;
    queue_init(&q, "history");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;
    /* A worker's failure, by the worker that claimed it. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-1", END), &m, 1), 1);
    assert_string_equal(msg_str(&m, "worker"), "w-1");
    assert_no_field(&m, "history");
    assert_string_equal(history_of(&q, id, &m), "");
    assert_string_equal(msg_str(&m, "worker"), "w-1");
    fail_ok(&q, id, "e1", "1", 0, &m);
    assert_no_field(&m, "worker");
    assert_string_equal(msg_str(&m, "history_dropped"), "0");
    assert_string_equal(history_of(&q, id, &m), "1/0/w-1/e1;");
    assert_string_equal(msg_str(&m, "last_error"), "e1");
    /* A lease expiry, claimed without a worker. */
    claim_one(&q, 1, &m);
    assert_no_field(&m, "worker");
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_string_equal(history_of(&q, id, &m), "1/0/w-1/e1;2/1//lease expired;");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    /* settle_claim claims with a worker, then fails it (retry at once) and
     * claims it back for another worker in the same call. */
    make_due(&q, id);
    expect_settled_one(fcall("settle_claim", &q, -1, "30000", "1", "0", "0", "0", "", "w-3", END),
                       NULL, &m);
    assert_string_equal(msg_str(&m, "worker"), "w-3");
    expect_settled_one(fcall("settle_claim", &q, -1, "30000", "1", "1", num(id), "", "failed",
                             "e3", "1", "0", "0", "0", "", "w-4", END), "pending", &m);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "worker"), "w-4");
    assert_string_equal(msg_str(&m, "history"), "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;");
    /* A kill of the lease: its worker goes into the entry. */
    expect_ok_msg(fcall("kill", &q, id, "", END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_no_field(&m, "worker");
    /* A replay appends a mark; last_error goes, the history stays. */
    expect_ok_msg(fcall("replay", &q, id, END), &m);
    assert_no_field(&m, "last_error");
    assert_string_equal(history_of(&q, id, &m),
                        "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;4/0/w-4/killed by operator;R;");
    /* A lease handed back keeps no worker: neither a later claim without one
     * nor a kill of the pending message shows it. */
    char token[64];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-5", END), &m, 1), 1);
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    claim_one(&q, 30000, &m);
    assert_no_field(&m, "worker");
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-6", END), &m, 1), 1);
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    expect_ok_msg(fcall("kill", &q, id, "gone", END), &m);
    /* replay_many marks too. */
    long long rm[1];
    redisReply *rr = fcall("replay_many", &q, -1, "ids", num(id), END);
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    rm[0] = rr->element[0]->integer;
    freeReplyObject(rr);
    assert_int_equal(rm[0], 1);
    assert_string_equal(history_of(&q, id, &m),
                        "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;4/0/w-4/killed by operator;R;"
                        "1/0//gone;R;");
    assert_string_equal(msg_str(&m, "history_dropped"), "0");
    /* export: JSONL has the whole array, CSV the count. */
    redisReply *ex = fcall("export", &q, -1, "jsonl", "", "100", "", END);
    assert_int_equal(ex->elements, 2);
    assert_non_null(strstr(ex->element[1]->str, "\"attempt\":4"));
    assert_non_null(strstr(ex->element[1]->str, "\"history_dropped\":0"));
    assert_non_null(strstr(ex->element[1]->str, "\"worker\":\"w-4\""));
    assert_non_null(strstr(ex->element[1]->str, "\"lease_expired\":true"));
    assert_non_null(strstr(ex->element[1]->str, "{\"replayed_at\":\""));
    freeReplyObject(ex);
    ex = fcall("export", &q, -1, "csv", "", "100", "", END);
    assert_int_equal(ex->elements, 2);
    assert_int_equal(strcmp(ex->element[1]->str + ex->element[1]->len - 6, ",job,7"), 0);
    freeReplyObject(ex);
    /* Bad workers are refused before anything is written. */
    char big[130];
    memset(big, 'w', 129);
    big[129] = '\0';
    expect_error(fcall("claim", &q, -1, "30000", "1", "", "", big, END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "0", "0", "0", "", big, END));
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
}

/* The last 20 entries are kept, older ones counted; an entry keeps at most
 * 1 KiB of its error, cut between characters, and last_error all of it. */
static void test_history_keeps_twenty(void **state)
{
    queue_t q;
    queue_init(&q, "historycap");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;
    for (int round = 1; round <= 2; round++) {
        for (int i = 1; i <= 10; i++) {
            char err[32];
            snprintf(err, sizeof err, "r%d-e%d", round, i);
            claim_one(&q, 30000, &m);
            fail_ok(&q, id, err, "1", 0, &m);
        }
        assert_string_equal(msg_str(&m, "status"), "dead");
        expect_ok_msg(fcall("replay", &q, id, END), &m);
    }
    const char *h = history_of(&q, id, &m);
    assert_string_equal(msg_str(&m, "history_dropped"), "2");
    assert_int_equal(strncmp(h, "3/0//r1-e3;", 11), 0);
    int entries = 0;
    for (const char *p = h; *p; p++) entries += *p == ';';
    assert_int_equal(entries, 20);
    assert_true(strstr(h, "10/0//r2-e10;R;") != NULL);

    /* "a" then 1000 "é" (2 bytes each): byte 1024 starts a character. */
    char err[2002];
    err[0] = 'a';
    for (int i = 0; i < 1000; i++) memcpy(err + 1 + 2 * i, "\xc3\xa9", 2);
    err[2001] = '\0';
    claim_one(&q, 30000, &m);
    freeReplyObject(fcall("fail", &q, id, "", err, "1", "0", END));
    redisReply *r = fcall("get", &q, id, END);
    const redisReply *msg = r->element[1], *hist = NULL;
    for (size_t i = 2; i + 1 < msg->elements; i += 2) {
        if (strcmp(msg->element[i]->str, "history") == 0) hist = msg->element[i + 1];
        if (strcmp(msg->element[i]->str, "last_error") == 0)
            assert_int_equal(msg->element[i + 1]->len, 2001);
        if (strcmp(msg->element[i]->str, "history_dropped") == 0)
            assert_string_equal(msg->element[i + 1]->str, "3");
    }
    assert_non_null(hist);
    assert_int_equal(hist->elements, 20 * 6);
    const redisReply *cut = hist->element[hist->elements - 1];
    assert_int_equal(cut->len, 1023);
    assert_memory_equal(cut->str, err, 1023);
    freeReplyObject(r);
}

/* The happy path pays nothing for the history: a claim and a succeed of a
 * message that never failed, claimed without a worker, write header bytes
 * with SETRANGE only and leave no trailer. A claim with a worker rewrites
 * the record once (SET) to keep it. */
static void test_history_happy_path_writes_no_trailer(void **state)
{
    queue_t q;
    queue_init(&q, "historyhappy");
    char payload[101];
    memset(payload, 'p', 100);
    payload[100] = '\0';
    long long id = enqueue_ok(&q, payload, 3, 0);
    redisReply *before = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(before->len, 124);
    freeReplyObject(rcmd("CONFIG", "RESETSTAT", END));
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(command_calls("set"), 0);
    assert_int_equal(command_calls("setrange"), 2);
    redisReply *after = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(after->len, 124);
    assert_int_equal((unsigned char)after->str[0], 0x01);     /* no trailer */
    assert_memory_equal(after->str, before->str, 9);           /* format .. created_at */
    assert_memory_equal(after->str + 24, payload, 100);
    freeReplyObject(before);
    freeReplyObject(after);
    assert_no_field(&m, "history");
    assert_no_field(&m, "worker");

    id = enqueue_ok(&q, payload, 3, 0);
    freeReplyObject(rcmd("CONFIG", "RESETSTAT", END));
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "host-1/42", END), &m, 1), 1);
    assert_int_equal(command_calls("set"), 1);
    assert_int_equal(command_calls("setrange"), 0);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(command_calls("set"), 1);
    assert_no_field(&m, "worker");
    assert_no_field(&m, "history");
}

/* A message retryd_v2 wrote (a HASH, no history) starts with an empty
 * history when retryd_v3 lifts it: its old failure is its last_error only. */
static void test_history_of_a_lifted_v2_message(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "historyv2");
    msg_t m;
    long long dead = v2_enqueue(&q, "old dead", "1", "0", "");
    v2_claim(&q, "600000", dead, &m);
    expect_ok_msg(fcall_v2("fail", &q, dead, msg_str(&m, "lease_token"), "old boom", "0", "-1", END), &m);
    long long leased = v2_enqueue(&q, "old lease", "3", "0", "");
    v2_claim(&q, "600000", leased, &m);
    assert_string_equal(history_of(&q, dead, &m), "");
    assert_string_equal(msg_str(&m, "last_error"), "old boom");
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    assert_string_equal(key_type(mkey(&q, dead)), "string");
    assert_string_equal(history_of(&q, dead, &m), "R;");
    fail_ok(&q, leased, "new boom", "1", -1, &m);
    assert_string_equal(key_type(mkey(&q, leased)), "string");
    assert_string_equal(history_of(&q, leased, &m), "1/0//new boom;");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_history_every_failure_kind),
        cmocka_unit_test(test_history_keeps_twenty),
        cmocka_unit_test(test_history_happy_path_writes_no_trailer),
        cmocka_unit_test(test_history_of_a_lifted_v2_message),
        cmocka_unit_test(test_series_counts_the_lifecycle),
        cmocka_unit_test(test_series_ring_wrap_and_spread),
        cmocka_unit_test(test_series_tick_samples_then_idle),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
