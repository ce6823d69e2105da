/* test_lua_messages.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: enqueue, claim, succeed, fail, extend, replay, reclaim,
 * promote, tick, get, list, export, idempotency, release and succeed_many.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_messages"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Reply shapes (each takes ownership of the reply and frees it). Each is a */
/* macro over an _at function so a failure names the test's line.           */
/* ------------------------------------------------------------------------ */

/* An array of n strings, each as expected. */
#define expect_strings(r, n, want) expect_strings_at((r), (n), (want), __FILE__, __LINE__)
static void expect_strings_at(redisReply *r, size_t n, const char *const *want,
                              const char *file, int line)
{
    char desc[256];
    snprintf(desc, sizeof desc, "%s", reply_desc(r));
    bool good = r->type == REDIS_REPLY_ARRAY && r->elements == n;
    size_t bad_at = n;
    for (size_t i = 0; good && i < n; i++) {
        good = r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, want[i]) == 0;
        if (!good) {
            bad_at = i;
            snprintf(desc, sizeof desc, "%s at %zu", reply_desc(r->element[i]), i);
        }
    }
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected %zu strings (\"%s\" at %zu), got %s", n,
                bad_at < n ? want[bad_at] : "", bad_at, desc);
}

/* ------------------------------------------------------------------------ */
/* Redis state                                                              */
/* ------------------------------------------------------------------------ */

/* Sets retry_count or max_retries of message id (a byte each in the record's
 * header, docs/storage.md): test setup for counts the API cannot reach. */
static void hset(const queue_t *q, long long id, const char *field, const char *value)
{
    long long offset = strcmp(field, "retry_count") == 0 ? 1 : 2;
    assert_true(offset == 1 || strcmp(field, "max_retries") == 0);
    int_reply(rcmd("EVAL", "return redis.call('SETRANGE', KEYS[1], ARGV[1], "
                           "struct.pack('B', tonumber(ARGV[2])))",
                   "1", mkey(q, id), num(offset), value, END));
}

/* ------------------------------------------------------------------------ */
/* Function wrappers                                                        */
/* ------------------------------------------------------------------------ */

/* One page of list: returns how many messages; ids, total and next cursor
 * (copied to next, "" at the end) out. */
static size_t list_page(const queue_t *q, const char *status, int limit, const char *cursor,
                        long long *ids, size_t max_ids, long long *total, char *next, size_t next_size)
{
    redisReply *r = fcall("list", q, -1, status, num(limit), cursor, END);
    if (!has_code(r, "ok"))
        fail_msg("list %s cursor \"%s\": %s", status, cursor, reply_desc(r));
    assert_true(r->elements >= 3);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
    *total = r->element[1]->integer;
    assert_int_equal(r->element[2]->type, REDIS_REPLY_STRING);
    assert_true(r->element[2]->len < next_size);
    memcpy(next, r->element[2]->str, r->element[2]->len + 1);
    size_t n = r->elements - 3;
    assert_true(n <= max_ids);
    assert_true(n <= (size_t)limit);
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        msg_parse(r->element[3 + i], &m);
        if (status[0] != '\0')
            assert_string_equal(msg_str(&m, "status"), status);
        ids[i] = m.id;
    }
    freeReplyObject(r);
    return n;
}

/* Walks a whole listing with pages of `limit`; returns how many ids. */
static size_t list_all(const queue_t *q, const char *status, int limit, long long *ids,
                       size_t max_ids, long long want_total)
{
    char cursor[128] = "", next[128];
    size_t n = 0;
    for (int page = 0; page < 1000; page++) {
        long long total;
        size_t got = list_page(q, status, limit, cursor, ids + n, max_ids - n, &total, next, sizeof next);
        assert_int_equal(total, want_total);
        n += got;
        if (next[0] == '\0')
            return n;
        assert_string_not_equal(next, cursor);
        strcpy(cursor, next);
    }
    fail_msg("listing of %s did not end", status);
    return 0;
}

#define assert_ids(got, n, want, want_n) assert_ids_at((got), (n), (want), (want_n), __FILE__, __LINE__)
static void assert_ids_at(const long long *got, size_t n, const long long *want, size_t want_n,
                          const char *file, int line)
{
    char a[256] = "", b[256] = "";
    for (size_t i = 0; i < n && strlen(a) < 200; i++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? "," : "", got[i]);
    for (size_t i = 0; i < want_n && strlen(b) < 200; i++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? "," : "", want[i]);
    if (strcmp(a, b) != 0)
        FAIL_AT(file, line, "ids [%s], expected [%s]", a, b);
}

/* ------------------------------------------------------------------------ */
/* enqueue                                                                  */
/* ------------------------------------------------------------------------ */

static void test_enqueue_ids_and_fields(void **state)
{
    queue_t q;
    queue_init(&q, "enqueue");
    long long t0 = redis_now_ms();
    for (long long i = 1; i <= 3; i++) {
        msg_t m;
        expect_enqueued(&q, fcall("enqueue", &q, -1, "job", "4", "0", END), &m);
        assert_int_equal(m.id, i);
        assert_string_equal(msg_str(&m, "payload"), "job");
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_count"), 0);
        assert_int_equal(msg_int(&m, "max_retries"), 4);
        assert_int_equal(msg_int(&m, "created_at"), msg_int(&m, "updated_at"));
        assert_in_range(msg_int(&m, "created_at"), t0, redis_now_ms());
        assert_no_field(&m, "retry_after");
        assert_no_field(&m, "last_error");
        assert_no_field(&m, "lease_token");
        assert_no_field(&m, "lease_expires_at");
    }
    assert_int_equal(llen(qkey(&q, "3:ready")), 3);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
    assert_int_equal(counter(&q, "enqueued"), 3);

    /* Ids are per queue. */
    queue_t other;
    queue_init(&other, "enqueue-other");
    assert_int_equal(enqueue_ok(&other, "job", 3, 0), 1);
}

static void test_enqueue_payload_binary_safe(void **state)
{
    static const char payload[] = "a\0b\"c'\n\r\\{q}:%s\x01\xff\0end\"";
    const size_t n = sizeof payload - 1;
    const char *args[] = { payload, "3", "0" };
    const size_t lens[] = { n, 1, 1 };
    queue_t q;
    queue_init(&q, "binary");
    msg_t m;

    expect_enqueued(&q, fcall_bin("enqueue", &q, -1, 3, args, lens), &m);
    const field_t *f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    expect_ok_msg(fcall("get", &q, m.id, END), &m);
    f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    claim_one(&q, 30000, &m);
    f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    /* The empty payload is a payload too. */
    expect_enqueued(&q, fcall("enqueue", &q, -1, "", "3", "0", END), &m);
    assert_non_null(msg_field(&m, "payload"));
    assert_int_equal(msg_field(&m, "payload")->len, 0);
}

static void test_enqueue_delayed(void **state)
{
    queue_t q;
    queue_init(&q, "delayed");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "later", "3", "60000", END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "created_at") + 60000);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), m.id), msg_int(&m, "retry_after"));
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
    expect_nothing_to_claim(&q);

    long long r[2];
    expect_ints(fcall("promote", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_in_range(r[1], 1, 60000);
    expect_nothing_to_claim(&q);

    /* Once due, it is claimable. */
    make_due(&q, m.id);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
}

static void test_enqueue_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "badenq");
    static const char *const bad_max[] = { "0", "11", "x", "1.5", "", "-3" };
    for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++)
        expect_error(fcall("enqueue", &q, -1, "p", bad_max[i], "0", END));
    expect_error(fcall("enqueue", &q, -1, "p", "3", "-1", END));
    expect_error(fcall("enqueue", &q, -1, "p", "3", "soon", END));
    expect_error(fcall("enqueue", &q, -1, END));
    /* Nothing was created, not even an id. */
    assert_int_equal(exists(qkey(&q, "seq")), 0);
    assert_int_equal(counter(&q, "enqueued"), 0);

    /* Both ends of the range are fine. */
    assert_int_equal(enqueue_ok(&q, "p", 1, 0), 1);
    assert_int_equal(enqueue_ok(&q, "p", 10, 0), 2);
}

/* Numbers that parse but are not finite must not become timestamps. */
static void test_numeric_arguments_reject_infinity(void **state)
{
    queue_t q;
    queue_init(&q, "inf");
    expect_error(fcall("enqueue", &q, -1, "p", "3", "inf", END));
    enqueue_ok(&q, "p", 3, 0);
    expect_error(fcall("claim", &q, -1, "inf", "1", END));
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_error(fcall("fail", &q, m.id, "", "e", "1", "inf", END));
    expect_error(fcall("extend", &q, m.id, "", "inf", END));
}

/* Integers past int64 (to_int takes "1e19"): int_arg must not spell them as
 * "%d" does, wrapped to -2^63, which made a delay of 1e19 ms due at once. */
static void test_numeric_arguments_past_int64(void **state)
{
    queue_t q;
    queue_init(&q, "huge");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "later", "3", "1e19", END), &m);
    redisReply *r = rcmd("ZSCORE", qkey(&q, "3:scheduled"), num(m.id), END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    double score = strtod(r->str, NULL);
    freeReplyObject(r);
    if (score < 1e19) fail_msg("scheduled at %.17g, want 1e19 ms from now", score);
    expect_nothing_to_claim(&q);
    assert_int_equal(llen(qkey(&q, "3:due")), 0);
}

/* ------------------------------------------------------------------------ */
/* claim                                                                    */
/* ------------------------------------------------------------------------ */

static void test_claim_fifo_and_lease(void **state)
{
    queue_t q;
    queue_init(&q, "fifo");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    for (long long want = 1; want <= 3; want++) {
        msg_t m;
        long long before = redis_now_ms();
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, want);
        assert_string_equal(msg_str(&m, "status"), "processing");
        assert_true(msg_field(&m, "lease_token")->len > 0);
        assert_in_range(msg_int(&m, "updated_at"), before, redis_now_ms());
        assert_int_equal(msg_int(&m, "lease_expires_at"), msg_int(&m, "updated_at") + 30000);
        assert_int_equal(zscore(qkey(&q, "3:processing"), m.id), msg_int(&m, "lease_expires_at"));
    }
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "claimed"), 3);
}

static void test_claim_count(void **state)
{
    queue_t q;
    queue_init(&q, "count");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[8];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "45000", "3", END), m, 8);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(m[i].id, (long long)i + 1);
        assert_string_equal(msg_str(&m[i], "status"), "processing");
        assert_int_equal(msg_int(&m[i], "lease_expires_at"), msg_int(&m[i], "updated_at") + 45000);
        assert_int_equal(zscore(qkey(&q, "3:processing"), m[i].id), msg_int(&m[i], "lease_expires_at"));
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(msg_str(&m[i], "lease_token"), msg_str(&m[j], "lease_token"));
    }
    /* Fewer left than asked for: what is there. */
    n = expect_ok_msgs(fcall("claim", &q, -1, "45000", "100", END), m, 8);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].id, 4);
    assert_int_equal(m[1].id, 5);
    assert_string_not_equal(msg_str(&m[0], "lease_token"), msg_str(&m[1], "lease_token"));
    expect_code(fcall("claim", &q, -1, "45000", "10", END), "ok", NULL);
    assert_int_equal(counter(&q, "claimed"), 5);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 5);
}

static void test_claim_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "badclaim");
    enqueue_ok(&q, "job", 3, 0);
    expect_error(fcall("claim", &q, -1, "0", "1", END));
    expect_error(fcall("claim", &q, -1, "x", "1", END));
    expect_error(fcall("claim", &q, -1, "1000", "0", END));
    expect_error(fcall("claim", &q, -1, "1000", "101", END));
    expect_error(fcall("claim", &q, -1, END));
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
}

static void test_claim_due_retry_before_fresh(void **state)
{
    queue_t q;
    queue_init(&q, "dueretry");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    fail_ok(&q, 1, "flaky", "1", 0, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), 1), msg_int(&m, "retry_after"));

    /* Id 1 is due: it goes before 2 and 3, which were enqueued later but never failed. */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "flaky");
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 3);
    expect_nothing_to_claim(&q);
}

static void test_claim_replayed_next(void **state)
{
    queue_t q;
    queue_init(&q, "replaynext");
    long long dead = make_dead(&q, "broken");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, dead);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
}

static void test_claim_skips_deleted(void **state)
{
    queue_t q;
    queue_init(&q, "deleted");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    msg_t ms[4];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), ms, 4);
    assert_int_equal(n, 2);
    assert_int_equal(ms[0].id, 2);
    assert_int_equal(ms[1].id, 3);
    assert_string_not_equal(msg_str(&ms[0], "lease_token"), msg_str(&ms[1], "lease_token"));
    assert_int_equal(exists(mkey(&q, 1)), 0); /* not brought back as a stub */
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
    assert_int_equal(counter(&q, "claimed"), 2);

    /* Lease tokens stay unique after the claimed counter was wound back. */
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 4);
    for (size_t i = 0; i < 2; i++)
        assert_string_not_equal(msg_str(&m, "lease_token"), msg_str(&ms[i], "lease_token"));
}

/* A deleted id at the head of ready must not hide the message behind it:
 * a claim of one returns the next live message, not nothing. */
static void test_claim_skips_deleted_head(void **state)
{
    queue_t q;
    queue_init(&q, "deletedhead");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
}

/* ------------------------------------------------------------------------ */
/* succeed, fail, extend: tokens and states                                 */
/* ------------------------------------------------------------------------ */

typedef redisReply *(*settle_fn)(const queue_t *q, long long id, const char *token);

static redisReply *do_succeed(const queue_t *q, long long id, const char *token)
{
    return fcall("succeed", q, id, token, END);
}

static redisReply *do_fail(const queue_t *q, long long id, const char *token)
{
    return fcall("fail", q, id, token, "boom", "1", "-1", END);
}

static redisReply *do_extend(const queue_t *q, long long id, const char *token)
{
    return fcall("extend", q, id, token, "30000", END);
}

static void check_settle(settle_fn op, const char *after)
{
    queue_t q;
    queue_init(&q, "settle");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m, got;

    expect_code(op(&q, 999, ""), "not_found", NULL);
    expect_code(op(&q, 1, ""), "invalid_state", "pending");

    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    expect_code(op(&q, 1, "not-the-token"), "lease_mismatch", NULL);
    expect_ok_msg(fcall("get", &q, 1, END), &got);
    assert_string_equal(msg_str(&got, "status"), "processing");
    assert_string_equal(msg_str(&got, "lease_token"), msg_str(&m, "lease_token"));

    expect_ok_msg(op(&q, 1, msg_str(&m, "lease_token")), &got);
    assert_int_equal(got.id, 1);
    assert_string_equal(msg_str(&got, "status"), after);

    /* "" accepts whatever lease is current. */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
    expect_ok_msg(op(&q, 2, ""), &got);
    assert_string_equal(msg_str(&got, "status"), after);
}

static void test_succeed_tokens_and_states(void **state) { check_settle(do_succeed, "succeeded"); }
static void test_fail_tokens_and_states(void **state) { check_settle(do_fail, "pending"); }
static void test_extend_tokens_and_states(void **state) { check_settle(do_extend, "processing"); }

static void test_succeed_moves_to_succeeded(void **state)
{
    queue_t q;
    queue_init(&q, "succeed");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_no_field(&m, "lease_token");
    assert_no_field(&m, "lease_expires_at");
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), id), msg_int(&m, "updated_at"));
    assert_int_equal(counter(&q, "succeeded"), 1);
    /* Settled once: no second time, with or without a token. */
    expect_code(fcall("succeed", &q, id, "", END), "invalid_state", "succeeded");
    expect_code(fcall("fail", &q, id, "", "late", "1", "-1", END), "invalid_state", "succeeded");
}

/* ------------------------------------------------------------------------ */
/* fail: backoff and dead letters                                           */
/* ------------------------------------------------------------------------ */

static void test_fail_backoff_then_dead(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "backoff");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    char error[32];

    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        snprintf(error, sizeof error, "error %d", n);
        fail_ok(&q, id, error, "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_count"), n);
        assert_string_equal(msg_str(&m, "last_error"), error);
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
        assert_no_field(&m, "lease_token");
        assert_no_field(&m, "lease_expires_at");
        expect_nothing_to_claim(&q); /* not due yet */
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "error 5", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 5);
    assert_string_equal(msg_str(&m, "last_error"), "error 5");
    assert_no_field(&m, "retry_after");
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), msg_int(&m, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), -1);
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "failed"), 5);
    assert_int_equal(counter(&q, "retried"), 4);
    assert_int_equal(counter(&q, "dead"), 1);
}

static void test_fail_dead_at_once(void **state)
{
    queue_t q;
    queue_init(&q, "deadnow");
    msg_t m;

    /* max_retries 1: the first failure is the last. */
    long long a = enqueue_ok(&q, "job", 1, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, a, "once", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_true(zscore(qkey(&q, "3:dead"), a) > 0);

    /* retryable "0": dead with retries left. */
    long long b = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, b, "poison", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "poison");
    assert_true(zscore(qkey(&q, "3:dead"), b) > 0);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
}

static void test_fail_retry_after_override(void **state)
{
    queue_t q;
    queue_init(&q, "override");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "slow down", "1", 12345, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 12345);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
    expect_error(fcall("fail", &q, id, "", "e", "1", "x", END));
    expect_error(fcall("fail", &q, id, END));
}

static void test_fail_backoff_cap(void **state)
{
    queue_t q;
    queue_init(&q, "cap");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;

    /* The largest backoff reachable with max_retries 10: n = 9, 512 s. */
    claim_one(&q, 30000, &m);
    hset(&q, id, "retry_count", "8");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_count"), 9);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 512000);

    /* 2^12 s is past the cap: 3600 s. max_retries is raised by hand, since
     * 10 (the API's limit) dies before the cap is ever reached. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    hset(&q, id, "max_retries", "20");
    hset(&q, id, "retry_count", "11");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 12);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 3600000);

    /* n = 10 with max_retries 10 is dead. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    hset(&q, id, "max_retries", "10");
    hset(&q, id, "retry_count", "9");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 10);
}

/* ------------------------------------------------------------------------ */
/* replay, extend                                                           */
/* ------------------------------------------------------------------------ */

static void test_replay(void **state)
{
    queue_t q;
    queue_init(&q, "replay");
    long long id = enqueue_ok(&q, "job", 2, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "first", "1", -1, &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "pending");
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "processing");
    fail_ok(&q, id, "second", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 2);
    long long died_at = msg_int(&m, "updated_at");

    expect_ok_msg(fcall("replay", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_int_equal(msg_int(&m, "max_retries"), 2);
    assert_string_equal(msg_str(&m, "payload"), "job");
    assert_true(msg_int(&m, "updated_at") >= died_at);
    assert_no_field(&m, "last_error");
    assert_no_field(&m, "retry_after");
    assert_no_field(&m, "dead_at");
    assert_no_field(&m, "lease_token");
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), -1);
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
    assert_int_equal(counter(&q, "replayed"), 1);

    expect_code(fcall("replay", &q, id, END), "invalid_state", "pending");
    expect_code(fcall("replay", &q, 999, END), "not_found", NULL);

    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, "", END), &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "succeeded");
    assert_int_equal(counter(&q, "replayed"), 1);
}

static void test_extend(void **state)
{
    queue_t q;
    queue_init(&q, "extend");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, e;
    claim_one(&q, 1000, &m);
    long long first = msg_int(&m, "lease_expires_at");

    expect_ok_msg(fcall("extend", &q, id, msg_str(&m, "lease_token"), "600000", END), &e);
    assert_string_equal(msg_str(&e, "status"), "processing");
    assert_string_equal(msg_str(&e, "lease_token"), msg_str(&m, "lease_token"));
    assert_int_equal(msg_int(&e, "lease_expires_at"), msg_int(&e, "updated_at") + 600000);
    assert_true(msg_int(&e, "lease_expires_at") > first);
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), msg_int(&e, "lease_expires_at"));

    /* A lease can be shortened too: the deadline is now + lease_ms. */
    expect_ok_msg(fcall("extend", &q, id, "", "5000", END), &e);
    assert_int_equal(msg_int(&e, "lease_expires_at"), msg_int(&e, "updated_at") + 5000);
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), msg_int(&e, "lease_expires_at"));

    expect_error(fcall("extend", &q, id, "", "0", END));
    expect_error(fcall("extend", &q, id, "", END));
}

/* ------------------------------------------------------------------------ */
/* reclaim, promote, tick                                                   */
/* ------------------------------------------------------------------------ */

static void test_reclaim_expired_lease(void **state)
{
    queue_t q;
    queue_init(&q, "reclaim");
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    long long short_id = enqueue_ok(&q, "job", 3, 0);
    long long long_id = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 1, &m);
    assert_int_equal(m.id, short_id);
    long long deadline = msg_int(&m, "lease_expires_at");
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, long_id);

    wait_until_ms(deadline);
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_in_range(r[1], 1, 60000);

    expect_ok_msg(fcall("get", &q, short_id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);
    assert_no_field(&m, "lease_token");
    assert_no_field(&m, "lease_expires_at");
    assert_int_equal(zscore(qkey(&q, "3:processing"), short_id), -1);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), short_id), msg_int(&m, "retry_after"));
    assert_int_equal(counter(&q, "lease_expired"), 1);
    assert_int_equal(counter(&q, "failed"), 1);

    /* The old holder's token no longer settles it. */
    expect_code(fcall("succeed", &q, short_id, "", END), "invalid_state", "pending");

    /* The other lease is untouched. */
    expect_ok_msg(fcall("get", &q, long_id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "processing");

    /* Nothing more to do. */
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);

    expect_error(fcall("reclaim", &q, -1, "0", END));
    expect_error(fcall("reclaim", &q, -1, "1001", END));
}

static void test_reclaim_last_retry_is_dead(void **state)
{
    queue_t q;
    queue_init(&q, "reclaimdead");
    long long id = enqueue_ok(&q, "job", 1, 0);
    msg_t m;
    claim_one(&q, 1, &m);
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], -1);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_true(zscore(qkey(&q, "3:dead"), id) > 0);
}

static void test_promote(void **state)
{
    queue_t q;
    queue_init(&q, "promote");
    long long r[2];
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 60000);
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_in_range(r[1], 1, 60000);

    /* All five due, id 5 earliest: due order is 5, 4, 3, 2, 1. */
    for (long long id = 1; id <= 5; id++)
        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", num(6 - id), num(id), END));
    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 3);
    assert_int_equal(r[1], 0); /* more are due already */
    assert_int_equal(llen(qkey(&q, "3:due")), 3);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 2);

    /* Within one batch the earliest due sits at the claim end (the right). */
    redisReply *ready = rcmd("LRANGE", qkey(&q, "3:due"), "0", "-1", END);
    assert_int_equal(ready->type, REDIS_REPLY_ARRAY);
    assert_int_equal(ready->elements, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(ready->element[i]->str, num(3 + (long long)i));
    freeReplyObject(ready);

    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[1], -1);
    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    expect_error(fcall("promote", &q, -1, "0", END));
    expect_error(fcall("promote", &q, -1, "1001", END));
    expect_error(fcall("promote", &q, -1, END));
}

/* Ids promoted by one call and not claimed yet must still go before ids that
 * fell due later and were promoted by a later call: due order across calls,
 * as the spec orders retries (oldest first), not the reverse. */
static void test_promoted_batches_keep_due_order(void **state)
{
    queue_t q;
    queue_init(&q, "promoteorder");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 3, 60000);
    /* Due order 1, 2, 3, 4; the timer promotes two per call. */
    for (long long id = 1; id <= 4; id++)
        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", num(id), num(id), END));
    long long r[2];
    expect_ints(fcall("promote", &q, -1, "2", END), 2, r);
    assert_int_equal(r[0], 2);
    expect_ints(fcall("promote", &q, -1, "2", END), 2, r);
    assert_int_equal(r[0], 2);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 4), 4);
    long long got[4];
    for (int i = 0; i < 4; i++)
        got[i] = m[i].id;
    const long long want[] = { 1, 2, 3, 4 };
    assert_ids(got, 4, want, 4);
}

static void test_tick(void **state)
{
    queue_t q;
    queue_init(&q, "tick");
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "1", "1", END), TICK_N, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], 0);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[4], 0);

    msg_t m;
    long long dead = make_dead(&q, "gone");
    long long dead_at = zscore(qkey(&q, "3:dead"), dead);
    long long done = enqueue_ok(&q, "job", 3, 0);
    claim_one(&q, 60000, &m);
    expect_ok_msg(fcall("succeed", &q, done, "", END), &m);
    long long done_at = msg_int(&m, "updated_at");
    long long leased = enqueue_ok(&q, "job", 3, 0);
    claim_one(&q, 1, &m);
    assert_int_equal(m.id, leased);
    long long deadline = msg_int(&m, "lease_expires_at");
    long long due = enqueue_ok(&q, "job", 3, 60000);
    make_due(&q, due);

    wait_until_ms(deadline > dead_at + 1 ? deadline : dead_at + 1);
    expect_ints(fcall("tick", &q, -1, "100", "1", "0", END), TICK_N, r);
    assert_int_equal(r[0], 1);    /* promoted: due */
    assert_int_equal(r[1], 1);    /* reclaimed: leased */
    assert_int_equal(r[2], 1);    /* expired: dead */
    assert_int_equal(r[3], 2000); /* leased's first backoff, now the only schedule */
    assert_int_equal(r[4], 1);    /* ready: due */

    assert_int_equal(exists(mkey(&q, dead)), 0);
    assert_int_equal(zscore(qkey(&q, "3:dead"), dead), -1);
    assert_int_equal(counter(&q, "expired_dead"), 1);
    assert_int_equal(exists(mkey(&q, done)), 1); /* succeeded_ttl 0 keeps it */
    expect_ok_msg(fcall("get", &q, leased, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(counter(&q, "lease_expired"), 1);
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, due);

    /* next_in_ms is the nearer of the next schedule and the next deadline. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0] + r[1] + r[2], 0);
    assert_in_range(r[3], 0, 2000);
    assert_int_equal(r[4], 0);

    /* Succeeded messages expire by their own ttl. */
    wait_until_ms(done_at + 1);
    expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), TICK_N, r);
    assert_int_equal(r[2], 1);
    assert_int_equal(exists(mkey(&q, done)), 0);
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), done), -1);
    assert_int_equal(counter(&q, "expired_succeeded"), 1);

    expect_error(fcall("tick", &q, -1, "0", "0", "0", END));
    expect_error(fcall("tick", &q, -1, "100", "x", "0", END));
    expect_error(fcall("tick", &q, -1, "100", "0", END));
}

static void test_tick_next_in_ms_from_lease(void **state)
{
    queue_t q;
    queue_init(&q, "ticklease");
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 5000, &m);
    enqueue_ok(&q, "job", 3, 60000);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0] + r[1] + r[2], 0);
    assert_in_range(r[3], 1, 5000);
}

static void test_tick_dead_ttl_zero_keeps(void **state)
{
    queue_t q;
    queue_init(&q, "keep");
    long long dead = make_dead(&q, "kept");
    wait_until_ms(zscore(qkey(&q, "3:dead"), dead) + 2);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[2], 0);
    assert_int_equal(exists(mkey(&q, dead)), 1);
    assert_true(zscore(qkey(&q, "3:dead"), dead) > 0);
    assert_int_equal(counter(&q, "expired_dead"), 0);
}

static void test_tick_limit(void **state)
{
    queue_t q;
    queue_init(&q, "ticklimit");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 60000);
    for (long long id = 1; id <= 5; id++)
        make_due(&q, id);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "2", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[3], 0);
    assert_int_equal(r[4], 2);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 3);
}

/* ------------------------------------------------------------------------ */
/* get, list                                                                */
/* ------------------------------------------------------------------------ */

static void test_get(void **state)
{
    queue_t q;
    queue_init(&q, "get");
    long long id = enqueue_ok(&q, "hello", 7, 0);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "payload"), "hello");
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "max_retries"), 7);
    expect_code(fcall("get", &q, 999, END), "not_found", NULL);
}

/* Ids 1 dead, 2 succeeded, 3 processing, 4 and 5 ready, 6 scheduled. */
static void make_one_of_each(const queue_t *q)
{
    msg_t m;
    for (int i = 0; i < 5; i++)
        enqueue_ok(q, "job", 1, 0);
    enqueue_ok(q, "job", 1, 60000);
    claim_one(q, 60000, &m);
    fail_ok(q, 1, "bad", "1", -1, &m);
    claim_one(q, 60000, &m);
    expect_ok_msg(fcall("succeed", q, 2, "", END), &m);
    claim_one(q, 60000, &m);
}

static void test_list_by_status(void **state)
{
    queue_t q;
    queue_init(&q, "liststatus");
    make_one_of_each(&q);
    struct { const char *status; long long ids[6]; size_t n; } cases[] = {
        { "pending", { 4, 5, 6 }, 3 },
        { "processing", { 3 }, 1 },
        { "succeeded", { 2 }, 1 },
        { "dead", { 1 }, 1 },
        { "", { 4, 5, 6, 3, 2, 1 }, 6 },   /* pending, processing, succeeded, dead */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        long long ids[16], total;
        char next[128];
        size_t n = list_page(&q, cases[c].status, 100, "", ids, 16, &total, next, sizeof next);
        assert_int_equal(total, cases[c].n);
        assert_string_equal(next, "");
        assert_ids(ids, n, cases[c].ids, cases[c].n);
    }

    /* An empty queue lists nothing. */
    queue_t empty;
    queue_init(&empty, "listempty");
    long long ids[4], total;
    char next[128];
    assert_int_equal(list_page(&empty, "", 10, "", ids, 4, &total, next, sizeof next), 0);
    assert_int_equal(total, 0);
    assert_string_equal(next, "");
    assert_int_equal(list_page(&empty, "dead", 10, "", ids, 4, &total, next, sizeof next), 0);
    assert_int_equal(list_page(&empty, "pending", 10, "", ids, 4, &total, next, sizeof next), 0);
}

static void test_list_pages_dead(void **state)
{
    queue_t q;
    queue_init(&q, "listdead");
    for (int i = 0; i < 5; i++)
        make_dead(&q, "bad");
    long long ids[16];
    const long long want[] = { 1, 2, 3, 4, 5 };
    assert_ids(ids, list_all(&q, "dead", 2, ids, 16, 5), want, 5);
}

static void test_list_pages_pending(void **state)
{
    queue_t q;
    queue_init(&q, "listpending");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 50000);
    enqueue_ok(&q, "job", 3, 40000);
    long long ids[16];
    const long long want[] = { 1, 2, 3, 5, 4 }; /* ready in claim order, then by due time */
    assert_ids(ids, list_all(&q, "pending", 2, ids, 16, 5), want, 5);
    /* A page boundary exactly at the end of ready. */
    assert_ids(ids, list_all(&q, "pending", 3, ids, 16, 5), want, 5);
    assert_ids(ids, list_all(&q, "pending", 1, ids, 16, 5), want, 5);
}

static void test_list_pages_all(void **state)
{
    queue_t q;
    queue_init(&q, "listall");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    long long ids[16];
    const long long want[] = { 1, 2, 3, 4, 5 };   /* pending in claim order */
    assert_ids(ids, list_all(&q, "", 2, ids, 16, 5), want, 5);

    long long total;
    char next[128];
    size_t n = list_page(&q, "", 2, "", ids, 16, &total, next, sizeof next);
    assert_int_equal(n, 2);
    assert_string_not_equal(next, "");
}

/* The message a cursor points at leaves the index between two pages. */
static void test_list_cursor_member_removed(void **state)
{
    queue_t q;
    queue_init(&q, "listremoved");
    for (int i = 0; i < 5; i++)
        make_dead(&q, "bad");
    long long ids[16], total;
    char next[128];
    size_t n = list_page(&q, "dead", 2, "", ids, 16, &total, next, sizeof next);
    assert_int_equal(n, 2);
    msg_t m;
    expect_ok_msg(fcall("replay", &q, ids[1], END), &m);
    n = list_page(&q, "dead", 2, next, ids, 16, &total, next, sizeof next);
    const long long want[] = { 3, 4 };
    assert_ids(ids, n, want, 2);
    assert_int_equal(total, 4);
}

/* Many dead letters share one score when one reclaim kills them all. A
 * cursor whose member left the index must still lead to the rest. */
static void test_list_cursor_member_removed_in_large_tie(void **state)
{
    enum { N = 100 };
    queue_t q;
    queue_init(&q, "listtie");
    for (int i = 0; i < N; i++)
        enqueue_ok(&q, "job", 1, 0);
    msg_t *m = calloc(N, sizeof *m);
    assert_non_null(m);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "1", num(N), END), m, N), N);
    wait_until_ms(msg_int(&m[0], "lease_expires_at"));
    free(m);
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "1000", END), 2, r);
    assert_int_equal(r[0], N);

    long long ids[N + 1], total;
    bool seen[N + 1] = { false };
    char cursor[128] = "", next[128];
    size_t listed = 0;
    for (int page = 0; page < 8; page++) {
        size_t n = list_page(&q, "dead", 10, cursor, ids, N, &total, next, sizeof next);
        assert_int_equal(n, 10);
        for (size_t i = 0; i < n; i++) {
            assert_false(seen[ids[i]]);
            seen[ids[i]] = true;
            listed++;
        }
        strcpy(cursor, next);
    }
    msg_t replayed;
    expect_ok_msg(fcall("replay", &q, ids[9], END), &replayed);
    for (int page = 0; page < 100 && cursor[0] != '\0'; page++) {
        size_t n = list_page(&q, "dead", 10, cursor, ids, N, &total, next, sizeof next);
        for (size_t i = 0; i < n; i++) {
            assert_false(seen[ids[i]]);
            seen[ids[i]] = true;
            listed++;
        }
        strcpy(cursor, next);
    }
    if (listed != N)
        fail_msg("the listing reached %zu of %d dead letters: the page after the removed "
                 "cursor member came back short with next_cursor \"\"", listed, N);
}

static void test_list_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "listbad");
    make_one_of_each(&q);
    static const struct { const char *status, *cursor; } bad[] = {
        { "dead", "abc" }, { "dead", "12" }, { "processing", "1:x" },
        { "pending", "x:1" }, { "pending", "r:-1" }, { "pending", "r:x" },
        { "pending", "s:nope" }, { "pending", "nonsense" },
        { "", "abc" }, { "", "-5" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_code(fcall("list", &q, -1, bad[i].status, "10", bad[i].cursor, END), "bad_cursor", NULL);
    expect_error(fcall("list", &q, -1, "bogus", "10", "", END));
    expect_error(fcall("list", &q, -1, "dead", "-1", "", END));
    expect_error(fcall("list", &q, -1, "dead", "1001", "", END));
    /* limit 0: the total alone (a sharded queue's listing counts the other
     * shards so, docs/sharding.md). */
    redisReply *t = fcall("list", &q, -1, "", "0", "", END);
    assert_true(t->type == REDIS_REPLY_ARRAY && t->elements == 3);
    assert_string_equal(t->element[0]->str, "ok");
    freeReplyObject(t);
    expect_error(fcall("list", &q, -1, END));
}

/* ------------------------------------------------------------------------ */
/* export                                                                   */
/* ------------------------------------------------------------------------ */

/* CSV injection (OWASP): a cell that starts with = + - @ TAB or CR would be
 * run as a formula by a spreadsheet; export writes it quoted behind a single
 * quote. Other cells keep RFC 4180 quoting only (docs/reference.md "Operator CLI (retryctl)"). */
static void test_export_csv_neutralises_formulas(void **state)
{
    static const struct { const char *payload, *error, *tail; } rows[] = {
        /* each row ends with history_count: one failure each */
        { "=1+1", "=HYPERLINK(\"http://x\",\"y\")",
          ",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",\"'=1+1\",1" },
        { "+SUM(A1)", "plain error", ",plain error,\"'+SUM(A1)\",1" },
        { "-2+3", "@cmd|' /C calc'!A0", ",\"'@cmd|' /C calc'!A0\",\"'-2+3\",1" },
        { "\tlead tab", "\rlead cr", ",\"'\rlead cr\",\"'\tlead tab\",1" },
        { "a=b, c", "x-y", ",x-y,\"a=b, c\",1" },
        { "'quoted", "", ",,'quoted,1" },
    };
    const size_t n = sizeof rows / sizeof rows[0];
    queue_t q;
    queue_init(&q, "export-csv");
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        long long id = enqueue_ok(&q, rows[i].payload, 1, 0);
        claim_one(&q, 60000, &m);
        assert_int_equal(m.id, id);
        fail_ok(&q, id, rows[i].error, "1", -1, &m);
    }
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n + 1)
        fail_msg("export csv: %s", reply_desc(r));
    /* Dead letters come oldest death first: row i is message i + 1. */
    for (size_t i = 0; i < n; i++) {
        const redisReply *line = r->element[1 + i];
        assert_int_equal(line->type, REDIS_REPLY_STRING);
        size_t tail = strlen(rows[i].tail);
        if (line->len < tail || memcmp(line->str + line->len - tail, rows[i].tail, tail) != 0)
            fail_msg("row %zu is \"%s\", want it to end with \"%s\"", i + 1, line->str,
                     rows[i].tail);
        char head[32];
        snprintf(head, sizeof head, "%zu,dead,", i + 1);
        assert_memory_equal(line->str, head, strlen(head));
    }
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* Idempotency, release, succeed_many, the wake channel                     */
/* ------------------------------------------------------------------------ */

static void test_enqueue_idempotency_key(void **state)
{
    queue_t q;
    queue_init(&q, "idem");
    msg_t m, d;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "first", "3", "0", "order-17", END), &m);
    assert_int_equal(m.id, 1);
    assert_string_equal(msg_str(&m, "idempotency_key"), "order-17");

    /* The same key again: the original message, nothing created. */
    expect_msg(fcall("enqueue", &q, -1, "second", "5", "60000", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_string_equal(msg_str(&d, "payload"), "first");
    assert_int_equal(msg_int(&d, "max_retries"), 3);
    assert_no_field(&d, "retry_after");
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
    assert_int_equal(counter(&q, "enqueued"), 1);
    long long ttl = int_reply(rcmd("PTTL", qkey(&q, "idem:order-17"), END));
    assert_in_range(ttl, 1, 24LL * 3600 * 1000);

    /* Still the original after it changed state. */
    claim_one(&q, 30000, &m);
    expect_msg(fcall("enqueue", &q, -1, "third", "3", "0", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_string_equal(msg_str(&d, "status"), "processing");

    /* Other keys, no key, and other queues are independent. */
    assert_int_equal(enqueue_ok(&q, "x", 3, 0), 2);
    expect_enqueued(&q, fcall("enqueue", &q, -1, "y", "3", "0", "order-18", END), &m);
    assert_int_equal(m.id, 3);
    expect_enqueued(&q, fcall("enqueue", &q, -1, "z", "3", "0", "", END), &m);
    assert_int_equal(m.id, 4);
    assert_no_field(&m, "idempotency_key");
    expect_enqueued(&q, fcall("enqueue", &q, -1, "z", "3", "0", "", END), &m);
    assert_int_equal(m.id, 5);
    queue_t other;
    queue_init(&other, "idem-other");
    expect_enqueued(&other, fcall("enqueue", &other, -1, "first", "3", "0", "order-17", END), &m);
    assert_int_equal(m.id, 1);

    /* The original is gone (retention): only its id comes back. */
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    expect_msg(fcall("enqueue", &q, -1, "again", "3", "0", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_int_equal(d.nfields, 0);

    /* 1..255 bytes. */
    char key[257];
    memset(key, 'k', 256);
    key[256] = '\0';
    expect_error(fcall("enqueue", &q, -1, "p", "3", "0", key, END));
    key[255] = '\0';
    expect_enqueued(&q, fcall("enqueue", &q, -1, "p", "3", "0", key, END), &m);
    assert_int_equal(m.id, 6);
}

static void test_release(void **state)
{
    queue_t q;
    queue_init(&q, "release");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 4), 3);
    char t1[64], t2[64];
    snprintf(t1, sizeof t1, "%.63s", msg_str(&m[0], "lease_token"));
    snprintf(t2, sizeof t2, "%.63s", msg_str(&m[1], "lease_token"));

    /* Only an exact current lease is released. */
    assert_int_equal(int_reply(fcall("release", &q, -1, "1", "nope", "2", "", "4", "", "999", "x", END)), 0);
    assert_int_equal(int_reply(fcall("release", &q, -1, END)), 0);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 3);

    assert_int_equal(int_reply(fcall("release", &q, -1, "1", t1, "2", t2, END)), 2);
    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_no_field(&g, "last_error");
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);
    assert_int_equal(zscore(qkey(&q, "3:processing"), 2), -1);
    assert_int_equal(counter(&q, "released"), 2);
    assert_int_equal(counter(&q, "failed"), 0);
    /* Released twice is released once. */
    assert_int_equal(int_reply(fcall("release", &q, -1, "1", t1, END)), 0);

    /* Back at the claim end, in their claim order, before fresh id 4. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 4), 3);
    assert_int_equal(m[0].id, 1);
    assert_int_equal(m[1].id, 2);
    assert_int_equal(m[2].id, 4);

    expect_error(fcall("release", &q, -1, "1", END));
    const char *args[202];
    for (size_t i = 0; i < 202; i++)
        args[i] = (i % 2) ? "t" : "1";
    expect_error(fcall_bin("release", &q, -1, 202, args, NULL));
}

static void test_succeed_many(void **state)
{
    queue_t q;
    queue_init(&q, "succeedmany");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[3];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 3), 3);
    static const char *const want[] = { "succeeded", "succeeded", "lease_mismatch",
                                        "invalid_state", "not_found" };
    expect_strings(fcall("succeed_many", &q, -1, "1", msg_str(&m[0], "lease_token"), "2", "",
                         "3", "wrong", "4", "", "999", "", END), 5, want);
    msg_t g;
    for (long long id = 1; id <= 2; id++) {
        expect_ok_msg(fcall("get", &q, id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "succeeded");
        assert_no_field(&g, "lease_token");
        assert_int_equal(zscore(qkey(&q, "3:succeeded"), id), msg_int(&g, "updated_at"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
    }
    expect_ok_msg(fcall("get", &q, 3, END), &g);
    assert_string_equal(msg_str(&g, "status"), "processing");
    assert_int_equal(counter(&q, "succeeded"), 2);

    /* The same id twice in one batch settles once. */
    static const char *const twice[] = { "succeeded", "invalid_state" };
    expect_strings(fcall("succeed_many", &q, -1, "3", msg_str(&m[2], "lease_token"),
                         "3", msg_str(&m[2], "lease_token"), END), 2, twice);
    assert_int_equal(counter(&q, "succeeded"), 3);

    expect_error(fcall("succeed_many", &q, -1, END));
    expect_error(fcall("succeed_many", &q, -1, "1", END));
    const char *args[202];
    for (size_t i = 0; i < 202; i++)
        args[i] = (i % 2) ? "" : "5";
    expect_error(fcall_bin("succeed_many", &q, -1, 202, args, NULL));
}

/* ------------------------------------------------------------------------ */
/* Many claims                                                              */
/* ------------------------------------------------------------------------ */

static void test_claim_every_id_once(void **state)
{
    enum { N = 200, BATCH = 7 };
    queue_t q;
    queue_init(&q, "many");
    for (int i = 0; i < N; i++)
        enqueue_ok(&q, "job", 3, 0);
    int seen[N + 1] = { 0 };
    size_t claimed = 0;
    msg_t m[BATCH];
    for (int round = 0; round < N; round++) {
        size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", num(BATCH), END), m, BATCH);
        if (n == 0)
            break;
        assert_true(n == BATCH || claimed + n == N);
        for (size_t i = 0; i < n; i++) {
            assert_in_range(m[i].id, 1, N);
            seen[m[i].id]++;
        }
        claimed += n;
    }
    assert_int_equal(claimed, N);
    for (int id = 1; id <= N; id++)
        if (seen[id] != 1)
            fail_msg("id %d claimed %d times", id, seen[id]);
    assert_int_equal(zcard(qkey(&q, "3:processing")), N);
    assert_int_equal(counter(&q, "claimed"), N);
}

/* ------------------------------------------------------------------------ */
/* Bounded work, orphans, walks under claims, reply bytes                   */
/* ------------------------------------------------------------------------ */

/* Every list and export call on a queue whose seq is 5,000,000 with a few
 * messages stays far below 10 ms (SLOWLOG), and a walk ends in few pages:
 * gaps in ids cost nothing. */
static void test_list_bounded_work(void **state)
{
    queue_t q;
    queue_init(&q, "bounded");
    freeReplyObject(rcmd("SET", qkey(&q, "seq"), "5000000", END));
    long long dead = make_dead(&q, "bang");              /* 5000001 */
    long long pending = enqueue_ok(&q, "only", 3, 0);    /* 5000002 */
    assert_int_equal(pending, 5000002);
    enqueue_ok(&q, "later", 3, 600000);                 /* 5000003, scheduled */

    redisReply *old = rcmd("CONFIG", "GET", "slowlog-log-slower-than", END);
    assert_int_equal(old->type, REDIS_REPLY_ARRAY);
    assert_int_equal(old->elements, 2);
    char was[32];
    snprintf(was, sizeof was, "%s", old->element[1]->str);
    freeReplyObject(old);
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", "10000", END));
    freeReplyObject(rcmd("SLOWLOG", "RESET", END));

    static const char *const statuses[] = { "", "pending", "dead", "succeeded", "processing" };
    static const char *const needles[] = { "", "zzz", "ang" };
    for (size_t s = 0; s < sizeof statuses / sizeof statuses[0]; s++) {
        for (size_t n = 0; n < sizeof needles / sizeof needles[0]; n++) {
            for (int bounds = 0; bounds < 2; bounds++) {
                char cursor[256] = "", next[256];
                int pages = 0;
                bool seen_pending = false, seen_dead = false;
                do {
                    redisReply *r = fcall("list", &q, -1, statuses[s], "1000", cursor, needles[n],
                                          bounds ? "0" : "", bounds ? "99999999999999" : "", END);
                    long long ids[1000], bytes;
                    size_t got = raw_page(r, ids, 1000, &bytes, next, sizeof next);
                    for (size_t i = 0; i < got; i++) {
                        seen_pending |= ids[i] == pending;
                        seen_dead |= ids[i] == dead;
                    }
                    snprintf(cursor, sizeof cursor, "%s", next);
                } while (cursor[0] != '\0' && ++pages < 5);
                if (cursor[0] != '\0')
                    fail_msg("list status \"%s\" error_contains \"%s\": not at the end after 5 "
                             "pages of 1000 (cursor %s)", statuses[s], needles[n], cursor);
                bool all = statuses[s][0] == '\0';
                if ((all || strcmp(statuses[s], "pending") == 0) && needles[n][0] == '\0')
                    assert_true(seen_pending);
                if ((all || strcmp(statuses[s], "dead") == 0) && strcmp(needles[n], "zzz") != 0)
                    assert_true(seen_dead);
            }
        }
        char cursor[256] = "", next[256];
        int pages = 0;
        do {
            redisReply *r = fcall("export", &q, -1, "jsonl", statuses[s], "1000", cursor, END);
            long long ids[1000], bytes;
            raw_export(r, ids, 1000, &bytes, next, sizeof next);
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 5);
        assert_string_equal(cursor, "");
    }

    redisReply *slow = rcmd("SLOWLOG", "GET", "10", END);
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", was, END));
    assert_int_equal(slow->type, REDIS_REPLY_ARRAY);
    if (slow->elements > 0) {
        const redisReply *e = slow->element[0];
        long long us = e->element[2]->integer;
        const redisReply *args = e->element[3];
        char what[256] = "";
        for (size_t i = 0; i < args->elements && strlen(what) < 200; i++)
            snprintf(what + strlen(what), sizeof what - strlen(what), " \"%s\"", args->element[i]->str);
        size_t n = slow->elements;
        freeReplyObject(slow);
        fail_msg("%zu slow calls; e.g. %lld us:%s", n, us, what);
    }
    freeReplyObject(slow);
}

/* ------------------------------------------------------------------------ */
/* Priority and expiry fields (docs/reference.md "Priority",               */
/* docs/lifecycle.md "Priority: one more command, only where used")         */
/* ------------------------------------------------------------------------ */

/* The priority field of m: 0 when absent (the library names it only above 0). */
static int priority_of(const msg_t *m)
{
    return msg_field(m, "priority") ? (int)msg_int(m, "priority") : 0;
}

/* The record's format byte (docs/storage.md): 1 + 2 * priority, + 0x80 with a trailer. */
static int format_byte(const queue_t *q, long long id)
{
    redisReply *r = rcmd("GETRANGE", mkey(q, id), "0", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 1);
    int b = (unsigned char)r->str[0];
    freeReplyObject(r);
    return b;
}

/* Claims up to count (one call); their ids in order into ids, each one's
 * priority into prios (when not NULL). Returns how many. */
static size_t claim_ids(const queue_t *q, int count, long long *ids, int *prios)
{
    static msg_t m[100];
    size_t n = expect_ok_msgs(fcall("claim", q, -1, "600000", num(count), END), m, 100);
    for (size_t i = 0; i < n; i++) {
        ids[i] = m[i].id;
        if (prios)
            prios[i] = priority_of(&m[i]);
    }
    return n;
}

static void test_enqueue_priority_and_expiry(void **state)
{
    queue_t q;
    queue_init(&q, "prio-enqueue");
    long long t0 = redis_now_ms(), expires;
    long long id = enqueue_with(&q, "job", 0, 60000, 4, &expires);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "priority"), 4);
    assert_int_equal(msg_int(&m, "expires_at"), msg_int(&m, "created_at") + 60000);
    assert_int_equal(expires, msg_int(&m, "expires_at"));
    assert_in_range(msg_int(&m, "created_at"), t0, redis_now_ms());
    assert_int_equal(format_byte(&q, id), 0x80 + 1 + 2 * 4);   /* expires_at is in the trailer */
    assert_int_equal(counter(&q, "priorities"), 1);

    /* Priority alone costs no trailer; none at all is the plain record. */
    id = enqueue_with(&q, "job", 0, -1, 9, &expires);
    assert_int_equal(expires, -1);
    assert_int_equal(format_byte(&q, id), 1 + 2 * 9);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "priority"), 9);
    assert_no_field(&m, "expires_at");
    id = enqueue_with(&q, "job", 0, -1, 0, &expires);
    assert_int_equal(format_byte(&q, id), 1);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_no_field(&m, "priority");
    assert_no_field(&m, "expires_at");
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    assert_int_equal(zcard(qkey(&q, "3:priority")), 2);

    /* A delayed message keeps its priority and expiry in the record; the
     * older ARGV shapes answer as they did. */
    id = enqueue_with(&q, "later", 600000, 1000, 2, &expires);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id) > 0, 1);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "priority"), 2);
    assert_int_equal(msg_int(&m, "expires_at"), msg_int(&m, "created_at") + 1000);
    redisReply *r = fcall("enqueue", &q, -1, "old", "3", "0", "", "1", "default", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 5);
    freeReplyObject(r);

    /* No ttl given: the policy's message_ttl (seconds) applies; a request's wins. */
    queue_t p;
    queue_init(&p, "prio-policy-ttl");
    int_reply(rcmd("HSET", qkey(&p, "policy"), "message_ttl", "30", END));
    id = enqueue_with(&p, "job", 0, -1, 0, &expires);
    expect_ok_msg(fcall("get", &p, id, END), &m);
    assert_int_equal(msg_int(&m, "expires_at"), msg_int(&m, "created_at") + 30000);
    assert_int_equal(expires, msg_int(&m, "expires_at"));
    id = enqueue_with(&p, "job", 0, 5000, 0, &expires);
    expect_ok_msg(fcall("get", &p, id, END), &m);
    assert_int_equal(msg_int(&m, "expires_at"), msg_int(&m, "created_at") + 5000);
    /* A queue that only ever had priority 0 never marks the stats. */
    assert_int_equal(counter(&p, "priorities"), 0);
    assert_int_equal(exists(qkey(&p, "3:priority")), 0);
}

static void test_enqueue_priority_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "prio-bad");
    static const char *const bad_priority[] = { "-1", "10", "x", "3.5", "1e1000" };
    for (size_t i = 0; i < sizeof bad_priority / sizeof bad_priority[0]; i++)
        expect_error(fcall("enqueue", &q, -1, "job", "3", "0", "", "", "", "", bad_priority[i], END));
    static const char *const bad_ttl[] = { "0", "-5", "2592000001", "1.5", "x" };
    for (size_t i = 0; i < sizeof bad_ttl / sizeof bad_ttl[0]; i++)
        expect_error(fcall("enqueue", &q, -1, "job", "3", "0", "", "", "", bad_ttl[i], "", END));
    assert_int_equal(exists(qkey(&q, "seq")), 0);
    assert_int_equal(enqueue_with(&q, "job", 0, 2592000000LL, 9, NULL), 1);
}

/* A queue holding, by id: 1 a due retry of priority 5, 2 a due retry of
 * priority 0, 3 a replayed dead letter of priority 5, then fresh 4 (p0),
 * 5 (p5), 6 (p9), 7 (p5), 8 (p0), 9 (p1). Claimed highest priority first,
 * and within one priority due retries and replays, then fresh FIFO. */
static const long long PRIO_MIX_ORDER[] = { 6, 1, 3, 5, 7, 9, 2, 4, 8 };
static const int PRIO_MIX_PRIORITY[] = { 9, 5, 5, 5, 5, 1, 0, 0, 0 };
enum { PRIO_MIX_N = 9 };

static void build_priority_mix(const queue_t *q)
{
    msg_t m;
    assert_int_equal(enqueue_with(q, "retry5", 0, -1, 5, NULL), 1);
    claim_one(q, 600000, &m);
    assert_int_equal(m.id, 1);
    assert_int_equal(priority_of(&m), 5);
    fail_ok(q, 1, "flaky", "1", -1, &m);
    /* A retry keeps its priority. */
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "priority"), 5);
    assert_int_equal(enqueue_with(q, "retry0", 0, -1, 0, NULL), 2);
    claim_one(q, 600000, &m);
    assert_int_equal(m.id, 2);
    fail_ok(q, 2, "flaky", "1", -1, &m);
    assert_int_equal(enqueue_with(q, "dead5", 0, -1, 5, NULL), 3);
    claim_one(q, 600000, &m);
    assert_int_equal(m.id, 3);
    fail_ok(q, 3, "broken", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    expect_ok_msg(fcall("replay", q, 3, END), &m);
    assert_int_equal(msg_int(&m, "priority"), 5);
    static const int fresh[] = { 0, 5, 9, 5, 0, 1 };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(enqueue_with(q, "fresh", 0, -1, fresh[i], NULL), 4 + (long long)i);
    make_due(q, 1);
    make_due(q, 2);
}

static void test_priority_claim_order(void **state)
{
    queue_t q;
    queue_init(&q, "prio-order");
    build_priority_mix(&q);
    for (size_t i = 0; i < PRIO_MIX_N; i++) {
        long long id;
        int prio;
        assert_int_equal(claim_ids(&q, 1, &id, &prio), 1);
        if (id != PRIO_MIX_ORDER[i])
            fail_msg("claim %zu took id %lld, expected %lld", i + 1, id, PRIO_MIX_ORDER[i]);
        assert_int_equal(prio, PRIO_MIX_PRIORITY[i]);
    }
    expect_nothing_to_claim(&q);

    /* A batch claim takes the same order. */
    queue_t b;
    queue_init(&b, "prio-order-batch");
    build_priority_mix(&b);
    long long ids[10];
    int prios[10];
    assert_int_equal(claim_ids(&b, 10, ids, prios), PRIO_MIX_N);
    assert_ids(ids, PRIO_MIX_N, PRIO_MIX_ORDER, PRIO_MIX_N);
    assert_memory_equal(prios, PRIO_MIX_PRIORITY, sizeof PRIO_MIX_PRIORITY);
    assert_int_equal(exists(qkey(&b, "3:priority")), 0);
    assert_int_equal(counter(&b, "claimed"), PRIO_MIX_N + 3);

    /* settle_claim claims through the same path. */
    queue_t s;
    queue_init(&s, "prio-order-settle");
    build_priority_mix(&s);
    static msg_t out[10];
    static const char *const none[1];
    assert_int_equal(expect_settled(settle_claim(&s, 600000, 10, 0, NULL), 0, none, out, 10),
                     PRIO_MIX_N);
    for (size_t i = 0; i < PRIO_MIX_N; i++)
        assert_int_equal(out[i].id, PRIO_MIX_ORDER[i]);
}

/* A retry made due goes back into the lane by its priority, as a due
 * retry: before fresh ones of its priority, after every higher one. */
static void test_priority_retry_keeps_priority(void **state)
{
    queue_t q;
    queue_init(&q, "prio-retry");
    assert_int_equal(enqueue_with(&q, "a", 0, -1, 3, NULL), 1);
    msg_t m;
    claim_one(&q, 600000, &m);
    fail_ok(&q, 1, "flaky", "1", -1, &m);
    assert_int_equal(enqueue_with(&q, "b", 0, -1, 3, NULL), 2);
    assert_int_equal(enqueue_with(&q, "c", 0, -1, 4, NULL), 3);
    assert_int_equal(enqueue_with(&q, "d", 0, -1, 0, NULL), 4);
    make_due(&q, 1);
    long long pr[2];
    expect_ints(fcall("promote", &q, -1, "100", END), 2, pr);
    assert_int_equal(pr[0], 1);
    assert_true(zscore(qkey(&q, "3:priority"), 1) > 0);
    assert_int_equal(llen(qkey(&q, "3:due")), 0);
    long long ids[4];
    assert_int_equal(claim_ids(&q, 4, ids, NULL), 4);
    static const long long want[] = { 3, 1, 2, 4 };
    assert_ids(ids, 4, want, 4);
    expect_ok_msg(fcall("get", &q, 1, END), &m);
    assert_int_equal(msg_int(&m, "priority"), 3);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
}

/* release and a lost claim's give-back put a lane id first of its priority;
 * a priority-0 id goes to the due list's claim end as before. */
static void test_priority_release_and_lost_claim(void **state)
{
    queue_t q;
    queue_init(&q, "prio-release");
    assert_int_equal(enqueue_with(&q, "a", 0, -1, 4, NULL), 1);
    assert_int_equal(enqueue_with(&q, "b", 0, -1, 4, NULL), 2);
    assert_int_equal(enqueue_with(&q, "c", 0, -1, 5, NULL), 3);
    assert_int_equal(enqueue_with(&q, "d", 0, -1, 0, NULL), 4);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "600000", "2", END), m, 4), 2);
    assert_int_equal(m[0].id, 3);
    assert_int_equal(m[1].id, 1);
    assert_int_equal(int_reply(fcall("release", &q, -1, "1", msg_str(&m[1], "lease_token"), END)), 1);
    assert_true(zscore(qkey(&q, "3:priority"), 1) > 0);
    long long ids[4];
    assert_int_equal(claim_ids(&q, 1, ids, NULL), 1);
    assert_int_equal(ids[0], 1);   /* before 2, which never left */

    /* A claim whose nonce release_lost gave up hands back all it leased. */
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "n-1", END)), 0);
    redisReply *r = fcall("claim", &q, -1, "600000", "2", "1", "default", "", "n-1", END);
    assert_true(has_code(r, "ok"));
    /* No message: the hint, the rate's wait, the policy's wait_ms (-1: none),
     * known (1: the queue had messages). */
    assert_int_equal(r->elements, 5);
    assert_int_equal(r->element[3]->integer, -1);
    assert_int_equal(r->element[4]->integer, 1);
    freeReplyObject(r);
    assert_true(zscore(qkey(&q, "3:priority"), 2) > 0);
    assert_int_equal(llen(qkey(&q, "3:due")), 1);   /* 4, priority 0 */
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
    assert_int_equal(claim_ids(&q, 4, ids, NULL), 2);
    static const long long want[] = { 2, 4 };
    assert_ids(ids, 2, want, 2);
}

/* The pending listing walks the lane first, in claim order, with a cursor
 * that keeps its place; an id promoted into the lane behind the cursor
 * while the walk goes on is listed at the end (lanelater); delete and kill
 * take lane ids out of the lane; counts include the lane. */
static void test_priority_listing_and_operators(void **state)
{
    queue_t q;
    queue_init(&q, "prio-list");
    assert_int_equal(enqueue_with(&q, "a", 0, -1, 0, NULL), 1);
    assert_int_equal(enqueue_with(&q, "b", 0, -1, 2, NULL), 2);
    assert_int_equal(enqueue_with(&q, "c", 0, -1, 7, NULL), 3);
    assert_int_equal(enqueue_with(&q, "d", 0, -1, 2, NULL), 4);
    assert_int_equal(enqueue_with(&q, "e", 600000, -1, 9, NULL), 5);
    long long ids[16];
    static const long long order[] = { 3, 2, 4, 1, 5 };
    assert_int_equal(list_all(&q, "pending", 1, ids, 16, 5), 5);
    assert_ids(ids, 5, order, 5);
    assert_int_equal(list_all(&q, "", 2, ids, 16, 5), 5);
    assert_ids(ids, 5, order, 5);
    msg_t m;
    redisReply *r = fcall("list", &q, -1, "pending", "1", "", END);
    assert_true(has_code(r, "ok") && r->elements == 4);
    msg_parse(r->element[3], &m);
    freeReplyObject(r);
    assert_int_equal(m.id, 3);
    assert_int_equal(msg_int(&m, "priority"), 7);

    /* Walk one page into the lane, then make 5 (priority 9) due and promote
     * it: it lands before the cursor, and the walk's second pass finds it. */
    long long total, got[4];
    char cursor[128], next[128];
    assert_int_equal(list_page(&q, "pending", 2, "", got, 4, &total, next, sizeof next), 2);
    assert_int_equal(got[1], 2);
    int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", num(redis_now_ms()), "5", END));
    long long pr[2];
    expect_ints(fcall("promote", &q, -1, "100", END), 2, pr);
    assert_int_equal(pr[0], 1);
    bool seen5 = false;
    for (int page = 0; page < 20 && next[0] != '\0'; page++) {
        strcpy(cursor, next);
        size_t n = list_page(&q, "pending", 2, cursor, got, 4, &total, next, sizeof next);
        for (size_t i = 0; i < n; i++)
            seen5 = seen5 || got[i] == 5;
    }
    assert_string_equal(next, "");
    assert_true(seen5);

    long long s[14];
    redisReply *st = fcall("stats", &q, -1, "0", END);
    assert_true(st->type == REDIS_REPLY_ARRAY && st->elements >= 14);
    for (size_t i = 0; i < 14; i += 2) s[i / 2] = st->element[i + 1]->integer;
    freeReplyObject(st);
    assert_int_equal(s[0], 5);   /* pending */
    assert_int_equal(s[1], 5);   /* ready: the lane's 4 and ready's 1 */
    long long tick[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "0", "0", "0", END), TICK_N, tick);
    assert_int_equal(tick[4], 5);

    /* delete and kill take an id out of the lane. */
    expect_code(fcall("delete", &q, 4, END), "ok", NULL);
    assert_int_equal(zscore(qkey(&q, "3:priority"), 4), -1);
    expect_ok_msg(fcall("kill", &q, 3, "", END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(zscore(qkey(&q, "3:priority"), 3), -1);
    assert_int_equal(zcard(qkey(&q, "3:priority")), 2);   /* 5 and 2 */
    assert_int_equal(claim_ids(&q, 10, ids, NULL), 3);
    static const long long left[] = { 5, 2, 1 };
    assert_ids(ids, 3, left, 3);
}

/* A paused queue counts a claim it held back while only the lane had
 * something claimable (flow.admit looks at the lane too). */
static void test_priority_held_claims_count_the_lane(void **state)
{
    queue_t q;
    queue_init(&q, "prio-held");
    enqueue_with(&q, "a", 0, -1, 6, NULL);
    int_reply(fcall("pause", &q, -1, "1", END));
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "held_paused"), 1);
}

/* A queue that never used priorities runs no command for them: claim,
 * promotion, batch claims and release run what they ran before the lane
 * (no ZPOPMIN, ZCARD, GETRANGE of a format byte, HGET of the flag). */
static void test_no_priorities_no_lane_commands(void **state)
{
    queue_t q;
    queue_init(&q, "prio-none");
    for (int i = 0; i < 8; i++)
        enqueue_with(&q, "job", 0, -1, 0, NULL);
    msg_t m;
    claim_one(&q, 600000, &m);   /* this Lua state reads the queue's flag once */
    fail_ok(&q, m.id, "flaky", "1", -1, &m);
    make_due(&q, m.id);
    freeReplyObject(rcmd("CONFIG", "RESETSTAT", END));
    long long ids[8];
    assert_int_equal(claim_ids(&q, 1, ids, NULL), 1);   /* promotes the retry, takes it */
    assert_int_equal(ids[0], 1);
    assert_int_equal(claim_ids(&q, 3, ids, NULL), 3);
    static msg_t held[3];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "600000", "2", "", "", "", "n-2", END),
                                    held, 3), 2);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(held[0].id),
                                     msg_str(&held[0], "lease_token"), END)), 1);
    assert_int_equal(command_calls("zpopmin"), 0);
    assert_int_equal(command_calls("zcard"), 0);
    assert_int_equal(command_calls("hget"), 0);
    assert_int_equal(command_calls("hset"), 0);
    assert_int_equal(command_calls("getrange"), 1);   /* release's header read */
    assert_int_equal(command_calls("lmpop"), 3);
    assert_int_equal(command_calls("zrange"), 3);     /* each claim's promotion */
    assert_int_equal(exists(qkey(&q, "3:priority")), 0);
    assert_int_equal(counter(&q, "priorities"), 0);
}

/* A lane this Lua state does not know of (written while it held otherwise:
 * here, the flag lost and the library loaded again) is found by tick's
 * probe and claimed again. */
static void test_priority_lane_found_by_tick(void **state)
{
    queue_t q;
    queue_init(&q, "prio-probe");
    assert_int_equal(enqueue_with(&q, "a", 0, -1, 3, NULL), 1);
    int_reply(rcmd("HDEL", qkey(&q, "stats"), "priorities", END));
    size_t len = 0;
    char *code = read_file(getenv("RETRYD_TEST_LUA"), &len);
    assert_non_null(code);
    load_library(code, len, true, RD_LIBRARY_NAME);
    free(code);
    expect_nothing_to_claim(&q);
    long long tick[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "0", "0", "0", END), TICK_N, tick);
    assert_int_equal(tick[4], 1);
    assert_int_equal(counter(&q, "priorities"), 1);
    long long id;
    assert_int_equal(claim_ids(&q, 1, &id, NULL), 1);
    assert_int_equal(id, 1);
}

/* ------------------------------------------------------------------------ */
/* Enqueue's ARGV[10..12]: attributes, the idempotency window, flags e and f  */
/* ------------------------------------------------------------------------ */

/* enqueue as the daemon sends it, with ARGV[10..12]; returns the reply. */
static redisReply *enqueue_sqs(const queue_t *q, const char *payload, const char *idem,
                               const char *attrs, size_t attrs_len, const char *window,
                               const char *flags)
{
    const char *args[] = { payload, "3", "0", idem, "1", "default", "", "", "", attrs, window, flags };
    size_t lens[12];
    /* attrs is binary (not NUL-terminated): its length is given. */
    for (size_t i = 0; i < 12; i++) lens[i] = i == 9 ? attrs_len : strlen(args[i]);
    return fcall_bin("enqueue", q, -1, 12, args, lens);
}

static long long enqueued_id(redisReply *r)
{
    if (!has_code(r, "ok") || r->elements != 6) fail_msg("enqueue: %s", reply_desc(r));
    long long id = r->element[1]->integer;
    freeReplyObject(r);
    return id;
}

/* The attributes (binary) come back in every reply that carries the
 * message: get, list, claim, settle_claim's claims. */
static void test_enqueue_attributes_answered(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "attrs");
    static const char attrs[] = "\x00\x01k\x00v\xff";
    const size_t alen = sizeof attrs - 1;
    long long id = enqueued_id(enqueue_sqs(&q, "body", "", attrs, alen, "", ""));
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    const field_t *f = msg_field(&m, "attributes");
    assert_non_null(f);
    assert_int_equal(f->len, alen);
    assert_memory_equal(f->value, attrs, alen);
    assert_no_field(&m, "first_received_at");

    redisReply *r = fcall("list", &q, -1, "", "10", "", "", "", "", END);
    assert_true(has_code(r, "ok") && r->elements == 4);
    msg_parse(r->element[3], &m);
    freeReplyObject(r);
    assert_int_equal(msg_field(&m, "attributes")->len, alen);

    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    assert_memory_equal(msg_field(&m, "attributes")->value, attrs, alen);

    /* Failed and claimed again through settle_claim: still there. */
    long long id2 = enqueued_id(enqueue_sqs(&q, "two", "", "A", 1, "", ""));
    const char *sc[] = { "30000", "2", "1", num(id), "", "failed", "x", "1", "0" };
    r = fcall_bin("settle_claim", &q, -1, 9, sc, NULL);
    assert_true(has_code(r, "ok") && r->elements >= 3);
    size_t seen = 0;
    for (size_t i = 2; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_ARRAY) continue;
        msg_parse(r->element[i], &m);
        if (m.id == id) assert_memory_equal(msg_field(&m, "attributes")->value, attrs, alen);
        else if (m.id == id2) assert_string_equal(msg_str(&m, "attributes"), "A");
        seen++;
    }
    freeReplyObject(r);
    assert_int_equal(seen, 2);
}

static void test_enqueue_attributes_bounded(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "attrsmax");
    size_t n = 262144;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'a', n + 1);
    long long id = enqueued_id(enqueue_sqs(&q, "p", "", big, n, "", ""));
    assert_true(id > 0);
    expect_error(enqueue_sqs(&q, "p", "", big, n + 1, "", ""));
    free(big);
    /* Nothing more was made. */
    redisReply *seq = rcmd("GET", qkey(&q, "seq"), END);
    assert_string_equal(seq->str, "1");
    freeReplyObject(seq);
}

/* ARGV[11]: the key dedups for the window given; "" and "0" keep 24 h. */
static void test_enqueue_idempotency_window(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "window");
    long long id = enqueued_id(enqueue_sqs(&q, "p", "k5", "", 0, "300000", ""));
    long long pttl = int_reply(rcmd("PTTL", qkey(&q, "idem:k5"), END));
    assert_true(pttl > 290000 && pttl <= 300000);
    redisReply *r = enqueue_sqs(&q, "p", "k5", "", 0, "300000", "");
    assert_true(has_code(r, "duplicate"));
    freeReplyObject(r);
    enqueued_id(enqueue_sqs(&q, "p", "k24", "", 0, "0", ""));
    pttl = int_reply(rcmd("PTTL", qkey(&q, "idem:k24"), END));
    assert_true(pttl > 86300000 && pttl <= 86400000);
    enqueued_id(enqueue_sqs(&q, "p", "kd", "", 0, "", ""));
    assert_true(int_reply(rcmd("PTTL", qkey(&q, "idem:kd"), END)) > 86300000);
    expect_error(enqueue_sqs(&q, "p", "kx", "", 0, "86400001", ""));
    expect_error(enqueue_sqs(&q, "p", "kx", "", 0, "-1", ""));
    expect_error(enqueue_sqs(&q, "p", "kx", "", 0, "", "x"));
    /* A short window runs out: the key may be used again. */
    enqueued_id(enqueue_sqs(&q, "p", "k1", "", 0, "1", ""));
    wait_until_ms(redis_now_ms() + 5);
    assert_true(enqueued_id(enqueue_sqs(&q, "p", "k1", "", 0, "1", "")) > id);
}

/* Flag e: a queue with neither a policy nor a message ever answers
 * not_found and nothing is written; with either, the enqueue is made. */
static void test_enqueue_flag_must_exist(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "mustexist");
    redisReply *r = enqueue_sqs(&q, "p", "", "", 0, "", "e");
    assert_true(has_code(r, "not_found"));
    assert_int_equal(r->elements, 1);
    freeReplyObject(r);
    r = rcmd("KEYS", qkey(&q, "*"), END);
    assert_int_equal(r->elements, 0);
    freeReplyObject(r);
    policy_set(&q, "merge", "lease_seconds", "60");
    assert_int_equal(enqueued_id(enqueue_sqs(&q, "p", "", "", 0, "", "e")), 1);

    queue_t q2;
    queue_init(&q2, "mustexist2");
    enqueue_ok(&q2, "p", 3, 0);   /* a message ever: the queue exists */
    assert_int_equal(enqueued_id(enqueue_sqs(&q2, "p", "", "", 0, "", "ef")), 2);
}

/* Flag c: a key that is the payload's digest dedups only on a queue whose
 * policy has content_based_dedup; elsewhere nothing is written and the
 * reply says so (the SQS face answered two sends of one body as one). */
static void test_enqueue_flag_content_dedup(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "contentdedup");
    policy_set(&q, "merge", "fifo_groups", "true");
    redisReply *r = enqueue_sqs(&q, "same", "digest", "", 0, "300000", "ec");
    assert_true(has_code(r, "invalid_state"));
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[1]->str, "no_content_dedup");
    freeReplyObject(r);
    r = rcmd("EXISTS", qkey(&q, "seq"), END);
    assert_int_equal(r->integer, 0);   /* nothing made */
    freeReplyObject(r);
    policy_set(&q, "merge", "content_based_dedup", "true");
    long long id = enqueued_id(enqueue_sqs(&q, "same", "digest", "", 0, "300000", "ec"));
    r = enqueue_sqs(&q, "same", "digest", "", 0, "300000", "ec");
    assert_true(has_code(r, "duplicate"));
    freeReplyObject(r);
    policy_set(&q, "merge", "content_based_dedup", "false");
    r = enqueue_sqs(&q, "same", "digest2", "", 0, "300000", "c");
    assert_true(has_code(r, "invalid_state"));
    freeReplyObject(r);
    /* Without c, the key dedups as any key does. */
    assert_true(enqueued_id(enqueue_sqs(&q, "same", "digest3", "", 0, "300000", "e")) > id);
}

/* Flag f: the first claim records its time; later claims keep it; a
 * message without f has no trailer and no field. */
static void test_enqueue_flag_first_receive(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "firstrecv");
    long long id = enqueued_id(enqueue_sqs(&q, "p", "", "", 0, "", "f"));
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_no_field(&m, "first_received_at");
    claim_one(&q, 30000, &m);
    long long first = msg_int(&m, "first_received_at");
    assert_int_equal(first, msg_int(&m, "updated_at"));
    fail_ok(&q, id, "again", "1", 0, &m);
    wait_until_ms(first + 2);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    assert_true(msg_int(&m, "updated_at") > first);
    assert_int_equal(msg_int(&m, "first_received_at"), first);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "first_received_at"), first);

    long long plain = enqueue_ok(&q, "plain", 3, 0);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, plain);
    assert_no_field(&m, "first_received_at");
    redisReply *b = rcmd("GETRANGE", mkey(&q, plain), "0", "0", END);
    assert_true((unsigned char)b->str[0] < 0x80);   /* no trailer */
    freeReplyObject(b);
}

/* Flag f costs a message's first claim nothing: the claim writes the
 * header's lease bytes alone (before, it wrote the record again to put its
 * time in the trailer), the first receive is that lease's time, and it
 * stays right after a release (no failure, no rewrite) and the next claim,
 * and after a lease that ran out and was redelivered. */
static void test_first_receive_costs_first_claim_nothing(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "firstcheap");
    long long id = enqueued_id(enqueue_sqs(&q, "p", "", "", 0, "", "f"));
    redisReply *before = rcmd("GET", mkey(&q, id), END);
    msg_t m;
    claim_one(&q, 30000, &m);
    long long first = msg_int(&m, "first_received_at");
    assert_int_equal(first, msg_int(&m, "updated_at"));
    redisReply *after = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(after->len, before->len);
    /* Past the 24-byte header (payload and trailer) nothing changed. */
    assert_memory_equal(after->str + 24, before->str + 24, before->len - 24);
    freeReplyObject(before);
    freeReplyObject(after);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "first_received_at"), first);

    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), msg_str(&m, "lease_token"), END)), 1);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "first_received_at"), first);
    wait_until_ms(first + 2);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    assert_true(msg_int(&m, "updated_at") > first);
    assert_int_equal(msg_int(&m, "first_received_at"), first);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "first_received_at"), first);
    /* A third claim keeps it too (it is in the trailer now). */
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), msg_str(&m, "lease_token"), END)), 1);
    claim_one(&q, 30000, &m);
    assert_int_equal(msg_int(&m, "first_received_at"), first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_attributes_answered),
        cmocka_unit_test(test_enqueue_attributes_bounded),
        cmocka_unit_test(test_enqueue_idempotency_window),
        cmocka_unit_test(test_enqueue_flag_must_exist),
        cmocka_unit_test(test_enqueue_flag_first_receive),
        cmocka_unit_test(test_first_receive_costs_first_claim_nothing),
        cmocka_unit_test(test_enqueue_flag_content_dedup),
        cmocka_unit_test(test_enqueue_ids_and_fields),
        cmocka_unit_test(test_enqueue_payload_binary_safe),
        cmocka_unit_test(test_enqueue_delayed),
        cmocka_unit_test(test_enqueue_bad_arguments),
        cmocka_unit_test(test_numeric_arguments_reject_infinity),
        cmocka_unit_test(test_numeric_arguments_past_int64),
        cmocka_unit_test(test_claim_fifo_and_lease),
        cmocka_unit_test(test_claim_count),
        cmocka_unit_test(test_claim_bad_arguments),
        cmocka_unit_test(test_claim_due_retry_before_fresh),
        cmocka_unit_test(test_claim_replayed_next),
        cmocka_unit_test(test_claim_skips_deleted),
        cmocka_unit_test(test_claim_skips_deleted_head),
        cmocka_unit_test(test_succeed_tokens_and_states),
        cmocka_unit_test(test_fail_tokens_and_states),
        cmocka_unit_test(test_extend_tokens_and_states),
        cmocka_unit_test(test_succeed_moves_to_succeeded),
        cmocka_unit_test(test_fail_backoff_then_dead),
        cmocka_unit_test(test_fail_dead_at_once),
        cmocka_unit_test(test_fail_retry_after_override),
        cmocka_unit_test(test_fail_backoff_cap),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_reclaim_expired_lease),
        cmocka_unit_test(test_reclaim_last_retry_is_dead),
        cmocka_unit_test(test_promote),
        cmocka_unit_test(test_promoted_batches_keep_due_order),
        cmocka_unit_test(test_tick),
        cmocka_unit_test(test_tick_next_in_ms_from_lease),
        cmocka_unit_test(test_tick_dead_ttl_zero_keeps),
        cmocka_unit_test(test_tick_limit),
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_list_by_status),
        cmocka_unit_test(test_list_pages_dead),
        cmocka_unit_test(test_list_pages_pending),
        cmocka_unit_test(test_list_pages_all),
        cmocka_unit_test(test_list_cursor_member_removed),
        cmocka_unit_test(test_list_cursor_member_removed_in_large_tie),
        cmocka_unit_test(test_list_bad_arguments),
        cmocka_unit_test(test_claim_every_id_once),
        cmocka_unit_test(test_enqueue_idempotency_key),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_succeed_many),
        cmocka_unit_test(test_export_csv_neutralises_formulas),
        cmocka_unit_test(test_list_bounded_work),
        cmocka_unit_test(test_enqueue_priority_and_expiry),
        cmocka_unit_test(test_enqueue_priority_bad_arguments),
        cmocka_unit_test(test_priority_claim_order),
        cmocka_unit_test(test_priority_retry_keeps_priority),
        cmocka_unit_test(test_priority_release_and_lost_claim),
        cmocka_unit_test(test_priority_listing_and_operators),
        cmocka_unit_test(test_priority_held_claims_count_the_lane),
        cmocka_unit_test(test_no_priorities_no_lane_commands),
        cmocka_unit_test(test_priority_lane_found_by_tick),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
