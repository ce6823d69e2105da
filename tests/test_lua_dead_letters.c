/* test_lua_dead_letters.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: alerts (lua/05_alerts.lua), redrive to another queue
 * (lua/65_redrive.lua) and dead-letter rules (docs/dead-letters.md).
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_dead_letters"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Alerts (lua/05_alerts.lua, docs/dead-letters.md)                         */
/* ------------------------------------------------------------------------ */

/* The stream id of element i of an alerts_take reply (2 + 5i; element 1 is the
 * queue's alert_url). */
static const char *take_sid(const redisReply *r, size_t i)
{
    assert_true(r->elements > 2 + 5 * i);
    char *s = scratch();
    snprintf(s, 192, "%s", r->element[2 + 5 * i]->str);
    return s;
}

static long long group_pending(const queue_t *q)
{
    redisReply *r = rcmd("XPENDING", qkey(q, "events"), "retryd-alerts", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

/* tick with an alert recheck answers `alerts` (and creates the group); take
 * hands each entry to one consumer and skips replays; touch keeps only a
 * consumer's own entries; take claims back idle ones; ack counts. */
static void test_alert_group_protocol(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "alerts");
    long long r[TICK_ROUND_N];
    /* No stream yet: no alerts, no group; without a recheck, not looked for. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], 0);
    long long id1 = make_dead(&q, "boom");
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], -1);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], 1);
    assert_in_range(r[3], 0, 5000);     /* due again within the recheck */
    assert_int_equal(group_pending(&q), 0);

    redisReply *t = fcall("alerts_take", &q, -1, "c1", "10", "5000", END);
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->elements, 7);
    assert_int_equal(t->element[0]->integer, 0);
    const char *sid1 = take_sid(t, 0);
    assert_int_equal(parse_int(t->element[3]->str, t->element[3]->len, "id"), id1);
    assert_string_equal(t->element[4]->str, "boom");
    assert_string_equal(t->element[5]->str, "1");
    freeReplyObject(t);
    /* Nothing new for c2, and c1's entry is not idle. */
    t = fcall("alerts_take", &q, -1, "c2", "10", "5000", END);
    assert_int_equal(t->elements, 2);
    freeReplyObject(t);
    /* Pending with c1: the tick still reports it. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], 1);

    /* A replay and a second death: c2 gets the death only; the replay is
     * acknowledged at once. */
    msg_t m;
    expect_ok_msg(fcall("replay", &q, id1, END), &m);
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, id1);
    fail_ok(&q, id1, "second", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    t = fcall("alerts_take", &q, -1, "c2", "10", "5000", END);
    assert_int_equal(t->elements, 7);
    assert_int_equal(parse_int(t->element[3]->str, t->element[3]->len, "id"), id1);
    assert_string_equal(t->element[4]->str, "second");
    const char *sid2 = take_sid(t, 0);
    freeReplyObject(t);
    assert_int_equal(group_pending(&q), 2);

    /* touch: c2 keeps its own entry only, and counts its failures. */
    t = fcall("alerts_touch", &q, -1, "c2", "3", sid1, sid2, END);
    assert_int_equal(t->elements, 1);
    assert_string_equal(t->element[0]->str, sid2);
    freeReplyObject(t);
    assert_int_equal(counter(&q, "alerts_failed"), 3);

    /* c1 went silent: with min_idle 0, c2 claims its entry back. */
    t = fcall("alerts_take", &q, -1, "c2", "10", "0", END);
    assert_true(t->elements >= 7);
    bool got1 = false;
    for (size_t i = 0; i < (t->elements - 2) / 5; i++) got1 |= strcmp(take_sid(t, i), sid1) == 0;
    assert_true(got1);
    freeReplyObject(t);
    assert_true(counter(&q, "alerts_claimed") >= 1);
    /* c1 no longer holds it. */
    t = fcall("alerts_touch", &q, -1, "c1", "0", sid1, END);
    assert_int_equal(t->elements, 0);
    freeReplyObject(t);

    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, sid1, sid2, END)), 2);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, sid1, END)), 0);
    assert_int_equal(counter(&q, "alerts_delivered"), 2);
    assert_int_equal(group_pending(&q), 0);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], 0);

    /* touch keeps every one of several entries (each must stay fresh, or
     * another instance claims it back while it is being posted). */
    for (int i = 0; i < 3; i++) make_dead(&q, "more");
    t = fcall("alerts_take", &q, -1, "c3", "10", "5000", END);
    assert_int_equal(t->elements, 17);
    const char *s3[3] = { take_sid(t, 0), take_sid(t, 1), take_sid(t, 2) };
    freeReplyObject(t);
    t = fcall("alerts_touch", &q, -1, "c3", "0", s3[0], s3[1], s3[2], END);
    assert_int_equal(t->elements, 3);
    freeReplyObject(t);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, s3[0], s3[1], s3[2], END)), 3);

    expect_error(fcall("alerts_take", &q, -1, "", "10", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "0", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "101", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "1", "-1", END));
    expect_error(fcall("alerts_touch", &q, -1, "c", "x", END));
    expect_error(fcall("alerts_ack", &q, -1, END));
    expect_error(fcall("tick", &q, -1, "100", "0", "0", "1", "-1", END));
}

/* Once the alert group exists, the events stream is trimmed exactly and a
 * death trimmed before delivery is counted (alerts_dropped): by emit when it
 * was never delivered, by alerts_take when it was pending with a consumer. */
static void test_alert_trim_counts_undelivered(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "alerttrim");
    const char *events = qkey(&q, "events");
    for (int i = 0; i < 10000; i++) {
        redisReply *x = rcmd("XADD", events, "*", "event", "dead", "id", "0", "error", "e",
                             "retry_count", "1", "at", "0", END);
        assert_int_equal(x->type, REDIS_REPLY_STRING);
        freeReplyObject(x);
    }
    long long r[TICK_ROUND_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_ROUND_N, r);
    assert_int_equal(r[6], 1);
    /* The oldest is delivered and acknowledged: trimming it counts nothing. */
    redisReply *t = fcall("alerts_take", &q, -1, "c", "1", "5000", END);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, take_sid(t, 0), END)), 1);
    freeReplyObject(t);
    make_dead(&q, "one");
    assert_int_equal(int_reply(rcmd("XLEN", events, END)), 10000);
    assert_int_equal(counter(&q, "alerts_dropped"), 0);
    /* The next oldest was never delivered. */
    make_dead(&q, "two");
    assert_int_equal(int_reply(rcmd("XLEN", events, END)), 10000);
    assert_int_equal(counter(&q, "alerts_dropped"), 1);
    /* Delivered to c, not acknowledged, then trimmed: counted when claimed. */
    t = fcall("alerts_take", &q, -1, "c", "1", "5000", END);
    freeReplyObject(t);
    make_dead(&q, "three");
    assert_int_equal(counter(&q, "alerts_dropped"), 1);
    t = fcall("alerts_take", &q, -1, "c2", "1", "0", END);
    freeReplyObject(t);
    assert_int_equal(counter(&q, "alerts_dropped"), 2);
}

/* ------------------------------------------------------------------------ */
/* Redrive to another queue (lua/65_redrive.lua, docs/dead-letters.md §4)   */
/* ------------------------------------------------------------------------ */

typedef struct {
    bool resumed;
    char next[64];
    size_t count;
    long long ids[8];
    char targets[8][96];
} taken_t;

/* redrive_take's {resumed, next, {id, target, max_retries, payload, priority, history}...}. */
#define expect_taken(r, out) expect_taken_at((r), (out), __FILE__, __LINE__)
static void expect_taken_at(redisReply *r, taken_t *out, const char *file, int line)
{
    memset(out, 0, sizeof *out);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING)
        FAIL_AT(file, line, "redrive_take: %s", reply_desc(r));
    out->resumed = r->element[0]->integer == 1;
    snprintf(out->next, sizeof out->next, "%s", r->element[1]->str);
    out->count = r->elements - 2;
    if (out->count > 8) FAIL_AT(file, line, "redrive_take: %zu letters", out->count);
    for (size_t i = 0; i < out->count; i++) {
        const redisReply *l = r->element[2 + i];
        if (l->type != REDIS_REPLY_ARRAY || l->elements != 6)
            FAIL_AT(file, line, "redrive_take letter %zu malformed", i);
        out->ids[i] = l->element[0]->integer;
        snprintf(out->targets[i], sizeof out->targets[i], "%s", l->element[1]->str);
    }
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* History of attempts and the claim's worker (docs/reference.md "History")                    */
/* ------------------------------------------------------------------------ */

/* redrive_in of one letter (max_retries 1, priority 0, no history, payload
 * "x"): the new id. */
static long long redrive_in_one(const queue_t *to, const queue_t *from, long long src_id)
{
    long long id = 0;
    expect_ints(fcall("redrive_in", to, -1, from->name, num(src_id), "1", "0", "", "x", END), 1,
                &id);
    return id;
}

/* The three steps one by one: a taken letter is in no index a state change
 * reads, shows dead with redriving_to, and every other operation refuses it;
 * step 2 repeated answers the same id and creates nothing; step 3 removes
 * the letter and its record once. */
static void test_redrive_steps(void **state)
{
    (void)state;
    queue_t src, dst;
    queue_init(&src, "rd-src");
    queue_init(&dst, "rd-dst");
    long long a = make_dead(&src, "boom a");
    long long b = make_dead(&src, "boom b");
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), END), &t);
    assert_false(t.resumed);
    assert_string_equal(t.next, "");
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], a);
    assert_string_equal(t.targets[0], dst.name);
    assert_int_equal(zscore(qkey(&src, "3:dead"), a), -1);
    assert_true(zscore(qkey(&src, "3:redriving"), a) > 0);
    msg_t m;
    expect_ok_msg(fcall("get", &src, a, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "redriving_to"), dst.name);
    /* No other operation touches it: the hole of the first design. */
    expect_code(fcall("replay", &src, a, END), "invalid_state", "redriving");
    expect_code(fcall("kill", &src, a, "", END), "invalid_state", "redriving");
    expect_code(fcall("delete", &src, a, END), "invalid_state", "redriving");
    long long r2[2];
    redisReply *rm = fcall("replay_many", &src, -1, "ids", num(a), END);
    assert_int_equal(rm->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rm->element[0]->integer, 0);
    freeReplyObject(rm);
    expect_ints(fcall("purge", &src, -1, "0", "10", END), 2, r2);
    assert_int_equal(r2[0], 1);   /* b only */
    assert_int_equal(exists(mkey(&src, b)), 0);
    assert_int_equal(exists(mkey(&src, a)), 1);
    long long tick[TICK_N];
    expect_ints(fcall("tick", &src, -1, "100", "1", "0", END), TICK_N, tick);
    assert_int_equal(exists(mkey(&src, a)), 1);
    /* Step 2, twice: one message. */
    long long n1 = redrive_in_one(&dst, &src, a);
    long long n2 = redrive_in_one(&dst, &src, a);
    assert_int_equal(n1, n2);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    expect_ok_msg(fcall("get", &dst, n1, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "origin_queue"), src.name);
    assert_int_equal(msg_int(&m, "origin_id"), a);
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_int_equal(msg_int(&m, "max_retries"), 1);
    assert_string_equal(msg_str(&m, "payload"), "x");
    assert_no_field(&m, "idempotency_key");
    assert_int_equal(counter(&dst, "redriven_in"), 1);
    /* Step 3, twice: the letter leaves once. */
    long long done;
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 1);
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 0);
    assert_int_equal(exists(mkey(&src, a)), 0);
    assert_int_equal(zcard(qkey(&src, "3:redriving")), 0);
    assert_int_equal(exists(qkey(&src, "3:redrive_to")), 0);
    assert_int_equal(counter(&src, "redriven"), 1);
    expect_code(fcall("get", &src, a, END), "not_found", NULL);
    /* Step 4: the key expires a day later. */
    done = int_reply(fcall("redrive_forget", &dst, -1, src.name, num(a), END));
    assert_int_equal(done, 1);
    char key[256];
    snprintf(key, sizeof key, "%s:redrive:%s:%lld", dst.base, src.name, a);
    long long ttl = int_reply(rcmd("PTTL", key, END));
    assert_true(ttl > 0 && ttl <= 24LL * 3600 * 1000);
}

/* A death moved to the dead_letter_queue carries the record's attributes
 * (the SQS face's packed MessageAttributes, binary) and its first-receive
 * flag: the letter in the target has the same attributes, and its first
 * claim records its own first receive. */
static void test_dead_letter_move_keeps_attributes(void **state)
{
    (void)state;
    queue_t src, dst;
    queue_init(&src, "rd-attr-src");
    queue_init(&dst, "rd-attr-dst");
    policy_set(&src, "merge", "max_retries", "1", "dead_letter_queue", dst.name);
    static const char attrs[] = "\x81\xa1n\x00\xff" "binary";
    const size_t alen = sizeof attrs - 1;
    const char *args[] = { "body", "1", "0", "", "1", "default", "", "", "", attrs, "", "f" };
    size_t lens[12];
    for (size_t i = 0; i < 12; i++) lens[i] = strlen(args[i]);
    lens[9] = alen;
    redisReply *e = fcall_bin("enqueue", &src, -1, 12, args, lens);
    assert_true(has_code(e, "ok"));
    long long id = e->element[1]->integer;
    freeReplyObject(e);
    msg_t m;
    claim_one(&src, 30000, &m);
    assert_true(msg_int(&m, "first_received_at") > 0);
    fail_ok(&src, id, "boom", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    /* The move: take the letter left in redriving, enqueue it in dst. */
    redisReply *t = fcall("redrive_take", &src, -1, "", "left", END);
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->elements, 3);
    assert_int_equal(t->element[0]->integer, 1);
    const redisReply *l = t->element[2];
    assert_int_equal(l->element[0]->integer, id);
    assert_string_equal(l->element[1]->str, dst.name);
    const char *in_args[] = { src.name, num(id), "0", "0", l->element[5]->str, "body" };
    size_t in_lens[6];
    for (size_t i = 0; i < 6; i++) in_lens[i] = strlen(in_args[i]);
    in_lens[4] = l->element[5]->len;
    long long nid = 0;
    expect_ints(fcall_bin("redrive_in", &dst, -1, 6, in_args, in_lens), 1, &nid);
    freeReplyObject(t);
    expect_ok_msg(fcall("get", &dst, nid, END), &m);
    assert_non_null(msg_field(&m, "attributes"));
    assert_int_equal(msg_field(&m, "attributes")->len, alen);
    assert_memory_equal(msg_field(&m, "attributes")->value, attrs, alen);
    assert_no_field(&m, "first_received_at");
    long long before = redis_now_ms();
    claim_one(&dst, 30000, &m);
    assert_int_equal(m.id, nid);
    assert_true(msg_int(&m, "first_received_at") >= before);
    assert_memory_equal(msg_field(&m, "attributes")->value, attrs, alen);
    /* A letter without them stays without them (no trailer field). */
    queue_t bare;
    queue_init(&bare, "rd-attr-bare");
    long long plain = make_dead(&bare, "plain");
    taken_t taken;
    expect_taken(fcall("redrive_take", &bare, -1, dst.name, "ids", num(plain), END), &taken);
    assert_int_equal(taken.count, 1);
    long long pid = redrive_in_one(&dst, &bare, plain);
    expect_ok_msg(fcall("get", &dst, pid, END), &m);
    assert_no_field(&m, "attributes");
    assert_no_field(&m, "first_received_at");
}

/* A letter replayed or deleted before the take is not taken (so never
 * copied), and one taken cannot be replayed or deleted before it lands. */
static void test_redrive_cannot_copy_a_replayed_letter(void **state)
{
    (void)state;
    queue_t src, dst;
    queue_init(&src, "rd-race");
    queue_init(&dst, "rd-race-dst");
    long long a = make_dead(&src, "e");
    long long b = make_dead(&src, "e");
    long long c = make_dead(&src, "e");
    msg_t m;
    expect_ok_msg(fcall("replay", &src, a, END), &m);
    expect_code(fcall("delete", &src, b, END), "ok", NULL);
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), num(b), num(c), END),
                 &t);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], c);
    expect_code(fcall("replay", &src, c, END), "invalid_state", "redriving");
    long long n = redrive_in_one(&dst, &src, c);
    assert_int_equal(int_reply(fcall("redrive_done", &src, -1, num(c), num(n), END)), 1);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    assert_int_equal(llen(qkey(&src, "3:due")), 1);   /* a, replayed in place */
    assert_int_equal(zcard(qkey(&src, "3:dead")), 0);
}

/* A take cut after step 1 or 2 leaves letters in redriving: the next take,
 * whatever its target and selection, answers them first with their recorded
 * target and selects nothing new; once they are done, it selects. */
static void test_redrive_resumes_left_letters(void **state)
{
    (void)state;
    queue_t src, dst, other;
    queue_init(&src, "rd-resume");
    queue_init(&dst, "rd-resume-dst");
    queue_init(&other, "rd-resume-other");
    long long a = make_dead(&src, "timeout");
    long long b = make_dead(&src, "refused");
    long long c = make_dead(&src, "timeout again");
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), END), &t);
    long long n1 = redrive_in_one(&dst, &src, a);   /* then the call was cut */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "error", "1000", "", "timeout", END),
                 &t);
    assert_true(t.resumed);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], a);
    assert_string_equal(t.targets[0], dst.name);
    assert_int_equal(redrive_in_one(&dst, &src, a), n1);
    long long done;
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 1);
    /* Now the selection: only the letters whose error matches. */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "error", "1000", "", "timeout", END),
                 &t);
    assert_false(t.resumed);
    assert_string_equal(t.next, "");
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], c);
    assert_string_equal(t.targets[0], other.name);
    assert_true(zscore(qkey(&src, "3:dead"), b) > 0);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    /* all takes what is dead (b); c is still redriving, answered first. */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "all", "1000", "", END), &t);
    assert_true(t.resumed);
    assert_int_equal(t.ids[0], c);
    done = int_reply(fcall("redrive_done", &src, -1, num(c), num(redrive_in_one(&other, &src, c)), END));
    expect_taken(fcall("redrive_take", &src, -1, other.name, "all", "1000", "", END), &t);
    assert_false(t.resumed);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], b);
    /* Stats count the letters in redriving. */
    redisReply *r = fcall("stats", &src, -1, "0", END);
    bool seen = false;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, "redriving") == 0) {
            assert_int_equal(r->element[i + 1]->integer, 1);
            seen = true;
        }
    freeReplyObject(r);
    assert_true(seen);
}

/* ------------------------------------------------------------------------ */
/* Dead-letter rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2)                    */
/* ------------------------------------------------------------------------ */

/* Claims the message (it must be id) and fails it; m is its new state. */
static void claim_fail(const queue_t *q, long long id, const char *error, const char *retryable,
                       long long retry_after_ms, msg_t *m)
{
    claim_one(q, 30000, m);
    assert_int_equal(m->id, id);
    fail_ok(q, id, error, retryable, retry_after_ms, m);
}

/* The first rule whose text is in the error decides; a retry rule that is
 * first to match a failure with retries left leaves the normal backoff (and
 * is not counted), even when a later dead rule would match too. */
static void test_rules_first_match_wins(void **state)
{
    queue_t q;
    queue_init(&q, "rulesfirst");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"rate\",\"action\":\"dead\"},"
               "{\"error_contains\":\"rate limit\",\"action\":\"retry\",\"delay_seconds\":300}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_fail(&q, id, "429 rate limit", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    assert_int_equal(counter(&q, "rule_1_retried"), 0);

    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"rate limit\",\"action\":\"retry\",\"delay_seconds\":300},"
               "{\"error_contains\":\"rate\",\"action\":\"dead\"}]");
    /* Counters count by position: a new list starts them again. */
    assert_int_equal(counter(&q, "rule_0_dead"), 0);
    id = enqueue_ok(&q, "job", 5, 0);
    claim_fail(&q, id, "429 rate limit", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);
    assert_int_equal(counter(&q, "rule_0_retried"), 0);
    assert_int_equal(counter(&q, "rule_1_dead"), 0);
    /* error_prefix: the error must start with it; with error_contains both hold. */
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_prefix\":\"HTTP 4\",\"error_contains\":\"bad\",\"action\":\"dead\"}]");
    make_due(&q, id);
    claim_fail(&q, id, "bad HTTP 400", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    make_due(&q, id);
    claim_fail(&q, id, "HTTP 400 bad request", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    /* A list written by hand that policy_set would refuse is no rules: the
     * failure still applies (the backoff), it does not fail the call. */
    static const char *const garbage[] = { "not json", "[{\"error_contains\":7}]",
                                           "[{\"error_contains\":\"x\",\"action\":\"dead\",\"max_times\":\"a\"}]" };
    for (size_t i = 0; i < 3; i++) {
        int_reply(rcmd("HSET", qkey(&q, "policy"), "dead_letter_rules", garbage[i], END));
        id = enqueue_ok(&q, "job", 5, 0);
        claim_fail(&q, id, "x 7", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
    }
}

/* retry: when the message would go dead (budget spent, or retryable false),
 * it is scheduled after delay_seconds instead, at most max_times per
 * message, then dead; its delay replaces retry_after_seconds. */
static void test_rules_retry_then_dead(void **state)
{
    queue_t q;
    queue_init(&q, "rulesretry");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300,\"max_times\":2}]");
    long long id = enqueue_ok(&q, "job", 1, 0);
    msg_t m;
    claim_fail(&q, id, "upstream 429", "1", 777, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 300000);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
    assert_int_equal(counter(&q, "rule_0_retried"), 1);
    assert_int_equal(counter(&q, "retried"), 1);
    make_due(&q, id);
    /* retryable false: the rule still brings it back (the worker's
     * "permanent" gives way to the operator's rule). */
    claim_fail(&q, id, "upstream 429", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 2);
    assert_int_equal(counter(&q, "rule_0_retried"), 2);
    make_due(&q, id);
    claim_fail(&q, id, "upstream 429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 3);
    assert_int_equal(counter(&q, "rule_0_retried"), 2);
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    /* A replay gives the rule its max_times again. */
    expect_ok_msg(fcall("replay", &q, id, END), &m);
    claim_fail(&q, id, "upstream 429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(counter(&q, "rule_0_retried"), 3);
    /* max_times is per message: another one gets its own. */
    long long other = enqueue_ok(&q, "job", 1, 0);
    claim_fail(&q, other, "429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    /* A delay of 0 brings it back at once. */
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"503\",\"action\":\"retry\"}]");
    long long now_id = enqueue_ok(&q, "job", 1, 0);
    int_reply(rcmd("DEL", qkey(&q, "3:scheduled"), END));
    claim_fail(&q, now_id, "503", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "updated_at"));
    claim_fail(&q, now_id, "503", "1", -1, &m);  /* max_times defaults to 1 */
    assert_string_equal(msg_str(&m, "status"), "dead");
}

/* dead: dead at once, even with retries left, on every path that fails a
 * message (fail, settle_claim, lease expiry); never on a kill. */
static void test_rules_dead_at_once(void **state)
{
    static const char *const dead[] = { "dead" };
    queue_t q;
    queue_init(&q, "rulesdead");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"invalid\",\"action\":\"dead\"},"
               "{\"error_contains\":\"lease expired\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m, got[1];
    claim_fail(&q, id, "invalid address", "1", 5000, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    assert_int_equal(counter(&q, "dead"), 1);

    id = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 30000, &m);
    char token[64];
    token_of(&m, token);
    settle_t f = FAILED(id, token, "invalid input", "1", -1);
    expect_settled(settle_claim(&q, 30000, 0, 1, &f), 1, dead, got, 0);
    assert_int_equal(counter(&q, "rule_0_dead"), 2);

    id = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 1, &m);
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_1_dead"), 1);

    /* A kill is an operator's decision, not a failure: no rule looks at it. */
    id = enqueue_ok(&q, "job", 5, 0);
    expect_ok_msg(fcall("kill", &q, id, "invalid", END), &m);
    assert_int_equal(counter(&q, "rule_0_dead"), 2);
}

/* An error no rule matches: the rules play no part (the reference table). */
static void test_rules_no_match_keeps_backoff(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "rulesnomatch");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300},"
               "{\"error_prefix\":\"fatal\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    for (int n = 1; n <= 4; n++) {
        claim_fail(&q, id, "smtp timeout, not fatal", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_fail(&q, id, "smtp timeout, not fatal", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    id = enqueue_ok(&q, "job", 5, 0);
    claim_fail(&q, id, "other", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_retried") + counter(&q, "rule_0_dead") +
                     counter(&q, "rule_1_dead"), 0);
}

/* policy_set checks every rule and names the field at fault (0-based). */
static void test_rules_validation(void **state)
{
    queue_t q;
    queue_init(&q, "rulesvalid");
    static const char *const bad[][2] = {
        { "{", "dead_letter_rules" },
        { "{\"a\":1}", "dead_letter_rules" },
        { "3", "dead_letter_rules" },
        { "[1]", "dead_letter_rules[0]" },
        { "[{\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
        { "[{\"error_contains\":\"\",\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
        { "[{\"error_prefix\":7,\"action\":\"dead\"}]", "dead_letter_rules[0].error_prefix" },
        { "[{\"error_contains\":\"x\"}]", "dead_letter_rules[0].action" },
        { "[{\"error_contains\":\"x\",\"action\":\"skip\"}]", "dead_letter_rules[0].action" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\",\"delay_seconds\":1}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\"},"
          "{\"error_contains\":\"y\",\"action\":\"retry\",\"max_times\":0}]",
          "dead_letter_rules[1].max_times" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"max_times\":101}]",
          "dead_letter_rules[0].max_times" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"delay_seconds\":86401}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"delay_seconds\":1.5}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\",\"when\":1}]", "dead_letter_rules[0]" },
        { "[{\"error_contains\":\"\xff\",\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
    };
    policy_set(&q, "replace", "max_retries", "4");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("policy_set", &q, -1, "merge", "dead_letter_rules", bad[i][0], END);
        if (!has_code(r, "invalid") || r->elements != 3 || strcmp(r->element[1]->str, bad[i][1]) != 0)
            fail_msg("%s: %s", bad[i][0], reply_desc(r));
        freeReplyObject(r);
    }
    /* 21 rules are too many; 20 are fine. */
    char list[2048] = "[";
    for (int i = 0; i < 21; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s{\"error_contains\":\"e%d\",\"action\":\"dead\"}",
                 i ? "," : "", i);
        if (i == 19) {
            char twenty[sizeof list + 1];
            memcpy(twenty, list, sizeof list);
            strcat(twenty, "]");
            policy_set(&q, "merge", "dead_letter_rules", twenty);
        }
    }
    strcat(list, "]");
    redisReply *r = fcall("policy_set", &q, -1, "merge", "dead_letter_rules", list, END);
    assert_true(has_code(r, "invalid"));
    assert_string_equal(r->element[1]->str, "dead_letter_rules");
    freeReplyObject(r);
    /* Stored canonical: defaults filled in; "" and [] take the rules away. */
    policy_set(&q, "merge", "dead_letter_rules",
               "[{\"error_contains\":\"x\",\"action\":\"retry\"}]");
    const char *stored = policy_field(&q, "dead_letter_rules");
    assert_non_null(strstr(stored, "\"max_times\":1"));
    assert_non_null(strstr(stored, "\"delay_seconds\":0"));
    assert_string_equal(policy_field(&q, "max_retries"), "4");
    /* Text beyond ASCII is fine when it is UTF-8, and matched as bytes. */
    policy_set(&q, "merge", "dead_letter_rules",
               "[{\"error_contains\":\"\xc3\xa9" "chec\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 4, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "\xc3\xa9" "chec d'envoi", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    policy_set(&q, "merge", "dead_letter_rules", "[]");
    assert_string_equal(policy_field(&q, "dead_letter_rules"), "");
    policy_set(&q, "merge", "dead_letter_rules", "[{\"error_contains\":\"x\",\"action\":\"dead\"}]");
    policy_set(&q, "merge", "dead_letter_rules", "");
    assert_string_equal(policy_field(&q, "dead_letter_rules"), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alert_group_protocol),
        cmocka_unit_test(test_alert_trim_counts_undelivered),
        cmocka_unit_test(test_redrive_steps),
        cmocka_unit_test(test_redrive_cannot_copy_a_replayed_letter),
        cmocka_unit_test(test_redrive_resumes_left_letters),
        cmocka_unit_test(test_dead_letter_move_keeps_attributes),
        cmocka_unit_test(test_rules_first_match_wins),
        cmocka_unit_test(test_rules_retry_then_dead),
        cmocka_unit_test(test_rules_dead_at_once),
        cmocka_unit_test(test_rules_no_match_keeps_backoff),
        cmocka_unit_test(test_rules_validation),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
