/* test_e2e_dlq.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: the dead-letter queue (docs/reference.md "Dead-letter queue",
 * docs/lifecycle.md): every cause of death moves the message once into the
 * target, chains are followed, cycles refused, and a move cut short by a
 * kill -9 or by a call that never finished completes exactly once.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_dlq"
#include "e2e_common.h"

enum { MOVE_MS = 2000 };  /* a healthy fleet moves a death within 2 s */

/* One request to another daemon's port, on a connection of its own. */
static void side_http(int port, e2e_response_t *r, const char *method, const char *path,
                      const char *body)
{
    e2e_response_free(r);
    e2e_conn_t c = { .fd = -1 };
    if (e2e_conn_open(&c, port) != 0) fail_msg("cannot connect to :%d", port);
    if (e2e_request(&c, method, path, NULL, body, body ? strlen(body) : 0, r) != 0)
        fail_msg("%s %s on :%d got no response", method, path, port);
    e2e_conn_close(&c);
}

static void put_policy(const char *q, const char *body)
{
    e2e_response_t r = { 0 };
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), body);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
}

/* The pending messages of q (a page of up to 100), as a parsed document the
 * caller frees with e2e_response_free(r). */
static rd_json_t *pending_of(e2e_response_t *r, const char *q)
{
    http(r, "GET", e2e_fmt("/queues/%s/messages?status=pending&limit=100", q), NULL);
    return e2e_jget(e2e_expect_json(r, 200), "messages");
}

/* Waits (at most MOVE_MS after the call) until q has `want` pending messages;
 * fails when it has more, or not that many in time. */
static void wait_pending(const char *q, size_t want)
{
    long long deadline = e2e_mono_ms() + MOVE_MS;
    e2e_response_t r = { 0 };
    for (;;) {
        size_t n = rd_json_array_size(pending_of(&r, q));
        if (n > want) fail_msg("%s has %zu pending messages, expected %zu", q, n, want);
        if (n == want) break;
        if (e2e_mono_ms() > deadline)
            fail_msg("%s has %zu pending messages %d ms later, expected %zu", q, n, MOVE_MS, want);
        e2e_pause_ms(20);
    }
    e2e_response_free(&r);
}

/* The message of q with this payload: exactly one, or the test fails. */
static rd_json_t *only_with_payload(rd_json_t *msgs, const char *payload)
{
    rd_json_t *found = NULL;
    for (size_t i = 0; i < rd_json_array_size(msgs); i++) {
        rd_json_t *m = rd_json_array_at(msgs, i);
        if (strcmp(e2e_jstr(m, "payload"), payload) != 0) continue;
        if (found) fail_msg("payload %s is in the target twice", payload);
        found = m;
    }
    if (found == NULL) fail_msg("payload %s is not in the target", payload);
    return found;
}

static long long stat_total(const char *q, const char *name)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *v = rd_json_get(e2e_jget(e2e_expect_json(&r, 200), "totals"), name);
    long long n = 0;
    if (v && !rd_json_integer(v, &n)) fail_msg("totals.%s is not an integer", name);
    e2e_response_free(&r);
    return n;
}

static long long stat_count(const char *q, const char *name)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    long long n = e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "counts"), name);
    e2e_response_free(&r);
    return n;
}

static void fail_message(const char *q, long long id, const char *body)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", message_path(q, id, "fail"), body);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
}

/* How many `dead` events the source's stream has (the alert fires there). */
static long long dead_events(const char *q)
{
    redisReply *x = redisCommand(g_redis, "XRANGE %s:{%s}:events - +", g_prefix, q);
    assert_non_null(x);
    long long n = 0;
    for (size_t i = 0; x->type == REDIS_REPLY_ARRAY && i < x->elements; i++) {
        redisReply *f = x->element[i]->element[1];
        if (f->elements >= 2 && strcmp(f->element[1]->str, "dead") == 0) n++;
    }
    freeReplyObject(x);
    return n;
}

/* Budget spent, retryable: false, a dead rule, kill and a lease expiry: each
 * death leaves the source and is a new pending message of the target, once,
 * with a fresh budget under the target's policy, its origin and its history;
 * counted at both ends, the dead event at the source. */
static void test_every_cause_of_death_moves_once(void **state)
{
    (void)state;
    char src[64], dst[64];
    e2e_queue_name(src, sizeof src, "dlq-src");
    e2e_queue_name(dst, sizeof dst, "dlq-dst");
    put_policy(dst, "{\"max_retries\":5}");
    put_policy(src, e2e_fmt("{\"max_retries\":1,\"dead_letter_queue\":\"%s\",\"dead_letter_rules\":"
                            "[{\"error_contains\":\"fatal\",\"action\":\"dead\"}]}", dst));
    e2e_response_t r = { 0 };

    long long spent = enqueue(src, "{\"payload\":\"spent\"}");
    assert_int_equal(claim_one(src, 30, NULL, 0), spent);
    fail_message(src, spent, "{\"error\":\"try 1\"}");

    long long final = enqueue(src, "{\"payload\":\"not-retryable\",\"max_retries\":3}");
    assert_int_equal(claim_one(src, 30, NULL, 0), final);
    fail_message(src, final, "{\"error\":\"bad input\",\"retryable\":false}");

    long long ruled = enqueue(src, "{\"payload\":\"by-rule\",\"max_retries\":3}");
    assert_int_equal(claim_one(src, 30, NULL, 0), ruled);
    fail_message(src, ruled, "{\"error\":\"fatal: no such user\"}");

    long long killed = enqueue(src, "{\"payload\":\"killed\",\"max_retries\":3}");
    http(&r, "POST", message_path(src, killed, "kill"), "{\"reason\":\"by hand\"}");
    rd_json_t *k = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(k, "status"), "dead");

    long long lapsed = enqueue(src, "{\"payload\":\"lease-expired\"}");
    assert_int_equal(claim_one(src, 1, NULL, 0), lapsed);

    /* The four settled deaths within MOVE_MS; the lease's after it lapses. */
    long long t0 = e2e_mono_ms();
    wait_pending(dst, 4);
    printf("test_e2e_dlq: 4 deaths moved within %lld ms\n", e2e_mono_ms() - t0);
    long long deadline = e2e_mono_ms() + 2000 + MOVE_MS;
    while (rd_json_array_size(pending_of(&r, dst)) < 5) {
        if (e2e_mono_ms() > deadline) fail_msg("the expired lease's death did not move");
        e2e_pause_ms(20);
    }
    wait_pending(dst, 5);

    rd_json_t *msgs = pending_of(&r, dst);
    struct { const char *payload; long long id; const char *last; } want[] = {
        { "spent", spent, "try 1" },
        { "not-retryable", final, "bad input" },
        { "by-rule", ruled, "fatal: no such user" },
        { "killed", killed, "by hand" },
        { "lease-expired", lapsed, "lease expired" },
    };
    for (size_t i = 0; i < 5; i++) {
        rd_json_t *m = only_with_payload(msgs, want[i].payload);
        assert_string_equal(e2e_jstr(m, "status"), "pending");
        assert_int_equal(e2e_jint(m, "retry_count"), 0);
        assert_int_equal(e2e_jint(m, "max_retries"), 5);
        e2e_jnull(m, "last_error");
        rd_json_t *o = e2e_jget(m, "origin");
        assert_string_equal(e2e_jstr(o, "queue"), src);
        assert_int_equal(e2e_jint(o, "id"), want[i].id);
        rd_json_t *h = e2e_jget(m, "history");
        assert_true(rd_json_array_size(h) >= 1);
        rd_json_t *last = rd_json_array_at(h, rd_json_array_size(h) - 1);
        assert_string_equal(e2e_jstr(last, "error"), want[i].last);
        /* The history keeps its times: the death came before the new message. */
        assert_true(e2e_jtime(last, "at") <= e2e_jtime(m, "created_at"));
    }
    /* The source keeps no dead letter of them. */
    long long ids[] = { spent, final, ruled, killed, lapsed };
    for (size_t i = 0; i < 5; i++) {
        char p[1024];
        SET(p, message_path(src, ids[i], NULL));
        http(&r, "GET", p, NULL);
        e2e_expect_problem(&r, 404, "not-found", p);
    }
    assert_int_equal(stat_count(src, "dead"), 0);
    assert_int_equal(stat_count(src, "redriving"), 0);
    assert_int_equal(stat_total(src, "dead"), 5);
    assert_int_equal(stat_total(src, "dead_lettered"), 5);
    assert_int_equal(stat_total(dst, "enqueued"), 5);
    assert_int_equal(dead_events(src), 5);
    e2e_response_free(&r);
}

/* An expiry is a death like the others: the expired message moves, with
 * its "expired" history entry, and gets the target's own message_ttl. */
static void test_expiry_moves_to_the_dead_letter_queue(void **state)
{
    (void)state;
    char src[64], dst[64];
    e2e_queue_name(src, sizeof src, "exp-src");
    e2e_queue_name(dst, sizeof dst, "exp-dst");
    put_policy(dst, "{\"message_ttl\":\"1h\"}");
    put_policy(src, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", dst));
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(src), "{\"payload\":\"stale\",\"ttl_seconds\":1,\"priority\":7}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    long long id = e2e_jint(m, "id");
    long long expires_at = e2e_jtime(m, "expires_at");
    assert_int_equal(expires_at - e2e_jtime(m, "created_at"), 1000);
    long long deadline = e2e_mono_ms() + 1000 + MOVE_MS;
    while (rd_json_array_size(pending_of(&r, dst)) == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the expired message did not move");
        e2e_pause_ms(20);
    }
    rd_json_t *msgs = pending_of(&r, dst);
    assert_int_equal(rd_json_array_size(msgs), 1);
    m = rd_json_array_at(msgs, 0);
    assert_string_equal(e2e_jstr(m, "payload"), "stale");
    assert_int_equal(e2e_jint(m, "priority"), 7);
    assert_int_equal(e2e_jint(e2e_jget(m, "origin"), "id"), id);
    rd_json_t *h = e2e_jget(m, "history");
    assert_int_equal(rd_json_array_size(h), 1);
    assert_string_equal(e2e_jstr(rd_json_array_at(h, 0), "error"), "expired");
    assert_true(e2e_jtime(rd_json_array_at(h, 0), "at") >= expires_at);
    /* The target's own expiry: an hour from its arrival. */
    assert_int_equal(e2e_jtime(m, "expires_at") - e2e_jtime(m, "created_at"), 3600 * 1000);
    assert_int_equal(stat_total(src, "expired"), 1);
    assert_int_equal(stat_total(src, "dead_lettered"), 1);
    e2e_response_free(&r);
}

/* A -> B -> C is followed; a PUT that would close a cycle, or name the queue
 * itself, is refused with 422 on dead_letter_queue and changes nothing. */
static void test_chain_followed_and_cycles_refused(void **state)
{
    (void)state;
    char a[64], b[64], c[64], path[1024];
    e2e_queue_name(a, sizeof a, "chain-a");
    e2e_queue_name(b, sizeof b, "chain-b");
    e2e_queue_name(c, sizeof c, "chain-c");
    put_policy(a, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", b));
    put_policy(b, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", c));
    e2e_response_t r = { 0 };

    SET(path, e2e_fmt("/queues/%s/policy", c));
    http(&r, "PUT", path, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", a));
    expect_field_error(expect_invalid(&r, path, 1), "dead_letter_queue", "invalid", NULL);
    http(&r, "PUT", path, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", c));
    expect_field_error(expect_invalid(&r, path, 1), "dead_letter_queue", "invalid", NULL);
    http(&r, "PUT", path, "{\"dead_letter_queue\":\"..\"}");
    expect_field_error(expect_invalid(&r, path, 1), "dead_letter_queue", "invalid", NULL);
    http(&r, "PUT", path, "{\"dead_letter_queue\":7}");
    expect_field_error(expect_invalid(&r, path, 1), "dead_letter_queue", "invalid", NULL);
    http(&r, "GET", path, NULL);
    e2e_jnull(e2e_expect_json(&r, 200), "dead_letter_queue");

    long long id = make_dead(a, "chained", "boom");
    wait_pending(b, 1);
    long long in_b = e2e_jint(rd_json_array_at(pending_of(&r, b), 0), "id");
    http(&r, "POST", message_path(b, in_b, "kill"), NULL);
    e2e_expect_json(&r, 200);
    wait_pending(c, 1);
    wait_pending(b, 0);
    rd_json_t *m = rd_json_array_at(pending_of(&r, c), 0);
    assert_string_equal(e2e_jstr(m, "payload"), "chained");
    assert_string_equal(e2e_jstr(e2e_jget(m, "origin"), "queue"), b);
    /* The whole way is in the history: A's failure, then B's kill. */
    rd_json_t *h = e2e_jget(m, "history");
    assert_int_equal(rd_json_array_size(h), 2);
    assert_string_equal(e2e_jstr(rd_json_array_at(h, 0), "error"), "boom");
    assert_string_equal(e2e_jstr(rd_json_array_at(h, 1), "error"), "killed by operator");
    (void)id;

    /* Once B leads nowhere, C -> A closes no cycle. */
    put_policy(b, "{\"dead_letter_queue\":null}");
    put_policy(c, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", a));
    e2e_response_free(&r);
}

/* On a daemon of its own under prefix (whose timer never ticks in time), src
 * gets dst as its dead_letter_queue and one message with payload, killed
 * by hand; then that daemon is killed -9, so its death's move is left in
 * src's redriving state. Returns the message's id. */
static long long die_then_kill9(const char *prefix, const char *src, const char *dst,
                                const char *payload)
{
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--tick-ms", "60000", NULL),
                     0);
    e2e_response_t r = { 0 };
    side_http(g_side.port, &r, "PUT", e2e_fmt("/queues/%s/policy", src),
              e2e_fmt("{\"dead_letter_queue\":\"%s\"}", dst));
    e2e_expect_json(&r, 200);
    side_http(g_side.port, &r, "POST", messages_path(src), e2e_fmt("{\"payload\":\"%s\"}", payload));
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    side_http(g_side.port, &r, "POST", message_path(src, id, "kill"), NULL);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_daemon_stop(&g_side, SIGKILL, E2E_STOP_TIMEOUT_MS);
    return id;
}

/* The instance that caused a death is killed (kill -9) right after it: the
 * letter waits in the source's redriving state, and another instance's
 * timer completes the move, once. */
static void test_move_completes_after_kill9(void **state)
{
    (void)state;
    char prefix[80], src[64], dst[64];
    snprintf(prefix, sizeof prefix, "%s-k9", g_prefix);
    e2e_queue_name(src, sizeof src, "k9-src");
    e2e_queue_name(dst, sizeof dst, "k9-dst");
    die_then_kill9(prefix, src, dst, "once");
    e2e_response_t r = { 0 };
    redisReply *x = redisCommand(g_redis, "ZCARD %s:{%s}:3:redriving", prefix, src);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);

    e2e_daemon_t other = { 0 };
    assert_int_equal(start_daemon(&other, g_redis_port, prefix, true, NULL), 0);
    long long deadline = e2e_mono_ms() + MOVE_MS + 1000;
    for (;;) {
        side_http(other.port, &r, "GET", e2e_fmt("/queues/%s/messages?status=pending", dst), NULL);
        size_t n = rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
        if (n == 1) break;
        if (e2e_mono_ms() > deadline) {
            e2e_daemon_stop(&other, SIGKILL, E2E_STOP_TIMEOUT_MS);
            fail_msg("the move did not complete after the kill -9");
        }
        e2e_pause_ms(20);
    }
    rd_json_t *m = rd_json_array_at(e2e_jget(r.json, "messages"), 0);
    assert_string_equal(e2e_jstr(m, "payload"), "once");
    x = redisCommand(g_redis, "ZCARD %s:{%s}:3:redriving", prefix, src);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    e2e_response_free(&r);
    assert_int_equal(e2e_daemon_stop(&other, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* A move cut after the target got its message (redrive_take and redrive_in
 * done, redrive_done never sent, as when its instance died there): the next
 * tick takes the same letter again and redrive_in answers the id it made, so
 * the target still has it once. */
static void test_move_cut_after_the_target_is_not_doubled(void **state)
{
    (void)state;
    char prefix[80], src[64], dst[64], sbase[160], dbase[160];
    snprintf(prefix, sizeof prefix, "%s-cut", g_prefix);
    e2e_queue_name(src, sizeof src, "cut-src");
    e2e_queue_name(dst, sizeof dst, "cut-dst");
    snprintf(sbase, sizeof sbase, "%s:{%s}", prefix, src);
    snprintf(dbase, sizeof dbase, "%s:{%s}", prefix, dst);
    die_then_kill9(prefix, src, dst, "cut");
    e2e_response_t r = { 0 };

    /* Steps 1 and 2 by hand, as the dead instance had sent them. */
    redisReply *x = redisCommand(g_redis, "FCALL retryd_v9_redrive_take 1 %s %s left", sbase, "");
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 3);
    redisReply *l = x->element[2];
    assert_int_equal(l->element[2]->integer, 0);   /* the target's budget */
    redisReply *in = redisCommand(g_redis, "FCALL retryd_v9_redrive_in 1 %s %s %lld 0 %lld %b %b",
                                  dbase, src, l->element[0]->integer, l->element[4]->integer,
                                  l->element[5]->str, l->element[5]->len, l->element[3]->str,
                                  l->element[3]->len);
    assert_int_equal(in->type, REDIS_REPLY_ARRAY);
    freeReplyObject(in);
    freeReplyObject(x);

    e2e_daemon_t other = { 0 };
    assert_int_equal(start_daemon(&other, g_redis_port, prefix, true, NULL), 0);
    long long deadline = e2e_mono_ms() + MOVE_MS + 1000;
    for (;;) {
        x = redisCommand(g_redis, "ZCARD %s:3:redriving", sbase);
        long long left = x->integer;
        freeReplyObject(x);
        if (left == 0) break;
        if (e2e_mono_ms() > deadline) {
            e2e_daemon_stop(&other, SIGKILL, E2E_STOP_TIMEOUT_MS);
            fail_msg("the cut move was not completed");
        }
        e2e_pause_ms(20);
    }
    side_http(other.port, &r, "GET", e2e_fmt("/queues/%s/messages?status=pending", dst), NULL);
    rd_json_t *msgs = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(msgs), 1);
    assert_string_equal(e2e_jstr(rd_json_array_at(msgs, 0), "payload"), "cut");
    e2e_response_free(&r);
    assert_int_equal(e2e_daemon_stop(&other, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* PATCH changes only the fields it gives; null puts one back to its default;
 * a dead_letter_queue closing a cycle is refused there too. */
static void test_policy_patch(void **state)
{
    (void)state;
    char q[64], other[64], path[1024];
    e2e_queue_name(q, sizeof q, "patch");
    e2e_queue_name(other, sizeof other, "patch-dlq");
    put_policy(q, "{\"max_retries\":5,\"max_in_flight\":7}");
    SET(path, e2e_fmt("/queues/%s/policy", q));
    e2e_response_t r = { 0 };
    http(&r, "PATCH", path, e2e_fmt("{\"dead_letter_queue\":\"%s\",\"message_ttl\":\"1h\"}", other));
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "max_retries"), 5);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 7);
    assert_int_equal(e2e_jint(p, "message_ttl"), 3600);
    assert_string_equal(e2e_jstr(p, "dead_letter_queue"), other);
    http(&r, "PATCH", path, "{\"max_retries\":null}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "max_retries"), 3);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 7);
    assert_string_equal(e2e_jstr(p, "dead_letter_queue"), other);
    char opath[1024];
    SET(opath, e2e_fmt("/queues/%s/policy", other));
    http(&r, "PATCH", opath, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", q));
    expect_field_error(expect_invalid(&r, opath, 1), "dead_letter_queue", "invalid", NULL);
    http(&r, "PATCH", path, "{\"on_expiry\":\"later\"}");
    expect_field_error(expect_invalid(&r, path, 1), "on_expiry", "invalid", NULL);
    http(&r, "PATCH", path, "{\"message_ttl\":\"31d\"}");
    expect_field_error(expect_invalid(&r, path, 1), "message_ttl", "invalid", NULL);
    http(&r, "PATCH", path, "{\"message_ttl\":-1}");
    expect_field_error(expect_invalid(&r, path, 1), "message_ttl", "invalid", NULL);
    http(&r, "GET", path, NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "message_ttl"), 3600);   /* unchanged */
    http(&r, "PATCH", path, "{\"dead_letter_queue\":null}");
    e2e_jnull(e2e_expect_json(&r, 200), "dead_letter_queue");
    /* Now the other way round closes no cycle. */
    http(&r, "PATCH", opath, e2e_fmt("{\"dead_letter_queue\":\"%s\"}", q));
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "dead_letter_queue"), q);
    e2e_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_every_cause_of_death_moves_once),
        T(test_expiry_moves_to_the_dead_letter_queue),
        T(test_chain_followed_and_cycles_refused),
        T(test_move_completes_after_kill9),
        T(test_move_cut_after_the_target_is_not_doubled),
        T(test_policy_patch),
    };
    int failed = cmocka_run_group_tests_name("e2e_dlq", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
