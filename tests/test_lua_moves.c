/* test_lua_moves.c - integration tests of the message move tasks
 * (lua/67_moves.lua, docs/sqs.md "Message move tasks") and redrive_take's
 * mode "move" (lua/65_redrive.lua) against a real redis-server: a task's
 * state, one active task per source, cancel, the runner's lease and its
 * takeover, the registry's watch list.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_moves"
#include "lua_support.h"

static const char REGISTRY[] = "retryd:queues";

static redisReply *fcall_registry(const char *fn, size_t n, const char *const *args)
{
    const char *argv[8];
    char name[64];
    snprintf(name, sizeof name, "%s%s", RD_FUNCTION(""), fn);
    argv[0] = "FCALL";
    argv[1] = name;
    argv[2] = "1";
    argv[3] = REGISTRY;
    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++) argv[4 + i] = args[i];
    return command_argv((int)(4 + n), argv, NULL);
}

/* move_watch's {"1"} or {"0"}. */
static void expect_watch(const char *const *args, const char *want)
{
    redisReply *r = fcall_registry("move_watch", 3, args);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, want);
    freeReplyObject(r);
}

/* The reply's element i, a string. */
static const char *str_at(const redisReply *r, size_t i)
{
    assert_true(r->type == REDIS_REPLY_ARRAY && i < r->elements);
    assert_int_equal(r->element[i]->type, REDIS_REPLY_STRING);
    return r->element[i]->str;
}

/* move_start: the task id ("ok"), or -id when one is active ("running"). */
static long long start_task(const queue_t *q, const char *dest, const char *rate,
                            const char *runner, const char *lease_ms, long long *to_move)
{
    redisReply *r = fcall("move_start", q, -1, dest, rate, runner, lease_ms, END);
    long long id;
    if (has_code(r, "running")) {
        id = -atoll(str_at(r, 1));
    } else {
        if (!has_code(r, "ok") || r->elements != 4) fail_msg("move_start: %s", reply_desc(r));
        id = atoll(str_at(r, 1));
        assert_true(atoll(str_at(r, 2)) > 0);
        if (to_move) *to_move = atoll(str_at(r, 3));
    }
    freeReplyObject(r);
    return id;
}

/* One task of move_list's reply: its 8 strings. */
typedef struct task {
    long long id, rate, started, moved, to_move;
    char status[16], destination[96], reason[64];
} task_t;

static size_t list_tasks(const queue_t *q, int max, task_t *out, size_t cap)
{
    redisReply *r = fcall("move_list", q, -1, num(max), END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements % 8, 0);
    size_t n = r->elements / 8;
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) {
        task_t *t = &out[i];
        t->id = atoll(str_at(r, 8 * i));
        snprintf(t->status, sizeof t->status, "%s", str_at(r, 8 * i + 1));
        snprintf(t->destination, sizeof t->destination, "%s", str_at(r, 8 * i + 2));
        t->rate = atoll(str_at(r, 8 * i + 3));
        t->started = atoll(str_at(r, 8 * i + 4));
        t->moved = atoll(str_at(r, 8 * i + 5));
        t->to_move = atoll(str_at(r, 8 * i + 6));
        snprintf(t->reason, sizeof t->reason, "%s", str_at(r, 8 * i + 7));
    }
    freeReplyObject(r);
    return n;
}

/* move_report's status ("lost" for that code). */
static void report(const queue_t *q, long long id, const char *runner, long long moved,
                   const char *lease_ms, const char *end, const char *want)
{
    redisReply *r = fcall("move_report", q, -1, num(id), runner, num(moved), lease_ms, end, "", END);
    if (strcmp(want, "lost") == 0) {
        if (!has_code(r, "lost")) fail_msg("move_report: %s, wanted lost", reply_desc(r));
    } else {
        if (!has_code(r, "ok")) fail_msg("move_report: %s", reply_desc(r));
        assert_string_equal(str_at(r, 1), want);
    }
    freeReplyObject(r);
}

/* A letter of dlq whose origin is `from`, as a death's move leaves it: a
 * pending message of dlq (redrive_in from `from`). */
static long long letter_from(const queue_t *dlq, const queue_t *from, long long src_id)
{
    long long id = 0;
    expect_ints(fcall("redrive_in", dlq, -1, from->name, num(src_id), "1", "0", "", "x", END), 1,
                &id);
    return id;
}

/* A task from start to its end: one active task per source, the list,
 * redrive_take's mode "move" sending each letter to its origin with the
 * target's own budget (a letter without origin stays), the runner's reports,
 * cancel. */
static void test_move_task_lifecycle(void **state)
{
    (void)state;
    queue_t dlq, a, b;
    queue_init(&dlq, "mv-dlq");
    queue_init(&a, "mv-a");
    queue_init(&b, "mv-b");
    policy_set(&a, "merge", "max_retries", "7");
    long long la = letter_from(&dlq, &a, 11);
    long long lb = letter_from(&dlq, &b, 12);
    long long orphan = enqueue_ok(&dlq, "sent here", 3, 0);
    long long to_move = 0;
    long long id = start_task(&dlq, "", "0", "r1", "10000", &to_move);
    assert_int_equal(id, 1);
    assert_int_equal(to_move, 3);
    assert_int_equal(start_task(&dlq, "", "5", "r2", "10000", NULL), -1);   /* one at a time */
    task_t t[10];
    assert_int_equal(list_tasks(&dlq, 10, t, 10), 1);
    assert_string_equal(t[0].status, "RUNNING");
    assert_string_equal(t[0].destination, "");
    assert_int_equal(t[0].to_move, 3);
    assert_int_equal(t[0].moved, 0);

    /* The batch: each letter to its origin, oldest first, max_retries 0
     * (the target's); the one without an origin stops the walk. */
    redisReply *r = fcall("redrive_take", &dlq, -1, "", "move", "100", "", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 0);
    assert_int_equal(r->elements, 4);
    char cursor[32];
    snprintf(cursor, sizeof cursor, "%s", str_at(r, 1));
    assert_int_equal(atoll(cursor), orphan);   /* the last id at the first take */
    long long late = letter_from(&dlq, &a, 13);   /* came after it: not moved */
    assert_int_equal(r->element[2]->element[0]->integer, la);
    assert_string_equal(r->element[2]->element[1]->str, a.name);
    assert_int_equal(r->element[2]->element[2]->integer, 0);
    assert_int_equal(r->element[3]->element[0]->integer, lb);
    assert_string_equal(r->element[3]->element[1]->str, b.name);
    freeReplyObject(r);
    msg_t m;
    expect_ok_msg(fcall("get", &dlq, la, END), &m);
    assert_string_equal(msg_str(&m, "redriving_to"), a.name);
    long long na = 0, nb = 0;
    expect_ints(fcall("redrive_in", &a, -1, dlq.name, num(la), "0", "0", "", "x", END), 1, &na);
    expect_ok_msg(fcall("get", &a, na, END), &m);
    assert_int_equal(msg_int(&m, "max_retries"), 7);   /* a's policy, not the letter's 1 */
    expect_ints(fcall("redrive_in", &b, -1, dlq.name, num(lb), "0", "0", "", "x", END), 1, &nb);
    assert_int_equal(int_reply(fcall("redrive_done", &dlq, -1, num(la), num(na), num(lb), num(nb),
                                     END)), 2);
    /* The next call: only the letter without an origin is left. */
    r = fcall("redrive_take", &dlq, -1, "", "move", "100", cursor, END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "no origin queue"));
    freeReplyObject(r);
    expect_ok_msg(fcall("get", &dlq, orphan, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    /* With a destination every letter goes there; the late one stays. */
    r = fcall("redrive_take", &dlq, -1, b.name, "move", "100", cursor, END);
    assert_int_equal(r->elements, 3);
    assert_int_equal(r->element[2]->element[0]->integer, orphan);
    assert_string_equal(r->element[2]->element[1]->str, b.name);
    assert_string_equal(str_at(r, 1), "");   /* done */
    freeReplyObject(r);
    expect_ok_msg(fcall("get", &dlq, late, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");

    report(&dlq, id, "r1", 1, "10000", "", "RUNNING");
    report(&dlq, id, "r2", 5, "10000", "", "lost");   /* not its runner */
    assert_int_equal(list_tasks(&dlq, 1, t, 10), 1);
    assert_int_equal(t[0].moved, 1);

    /* Cancel: CANCELLING until the runner's batch ends, then CANCELLED even
     * when the runner says it completed. */
    r = fcall("move_cancel", &dlq, -1, num(id), END);
    assert_true(has_code(r, "ok"));
    assert_string_equal(str_at(r, 1), "1");
    freeReplyObject(r);
    report(&dlq, id, "r1", 0, "10000", "", "CANCELLING");
    report(&dlq, id, "r1", 1, "10000", "COMPLETED", "CANCELLED");
    report(&dlq, id, "r1", 0, "10000", "", "lost");
    assert_int_equal(list_tasks(&dlq, 10, t, 10), 1);
    assert_string_equal(t[0].status, "CANCELLED");
    assert_int_equal(t[0].moved, 2);
    expect_code(fcall("move_cancel", &dlq, -1, num(id), END), "invalid_state", "CANCELLED");
    expect_code(fcall("move_cancel", &dlq, -1, "99", END), "not_found", NULL);

    /* The next task, to a fixed destination, paced; FAILED keeps its reason. */
    long long id2 = start_task(&dlq, b.name, "3", "r1", "10000", &to_move);
    assert_int_equal(id2, 2);
    assert_int_equal(to_move, 1);   /* the late one; the orphan is redriving */
    r = fcall("move_report", &dlq, -1, num(id2), "r1", "0", "10000", "FAILED", "queue gone", END);
    assert_true(has_code(r, "ok"));
    assert_string_equal(str_at(r, 1), "FAILED");
    freeReplyObject(r);
    assert_int_equal(list_tasks(&dlq, 10, t, 10), 2);
    assert_int_equal(t[0].id, 2);   /* newest first */
    assert_string_equal(t[0].status, "FAILED");
    assert_string_equal(t[0].destination, b.name);
    assert_int_equal(t[0].rate, 3);
    assert_string_equal(t[0].reason, "queue gone");
    assert_int_equal(t[1].id, 1);

    /* Bad arguments are refused. */
    expect_error(fcall("move_start", &dlq, -1, "", "501", "r1", "10000", END));
    expect_error(fcall("move_start", &dlq, -1, "", "1", "", "10000", END));
    expect_error(fcall("move_start", &dlq, -1, "", "1", "r1", "0", END));
    expect_error(fcall("move_list", &dlq, -1, "11", END));
    expect_error(fcall("move_report", &dlq, -1, num(id2), "r1", "0", "10000", "DONE", "", END));
}

/* The runner's lease: a task whose lease ran out is taken over by
 * move_claim (its old runner's reports are then "lost"); a live lease is
 * "busy"; "release" hands it over at once; a CANCELLING task nobody runs
 * ends CANCELLED at the next claim. */
static void test_move_task_takeover(void **state)
{
    (void)state;
    queue_t dlq;
    queue_init(&dlq, "mv-lease");
    enqueue_ok(&dlq, "x", 3, 0);
    expect_code(fcall("move_claim", &dlq, -1, "r2", "10000", END), "none", NULL);
    long long id = start_task(&dlq, "elsewhere", "0", "r1", "50", NULL);
    redisReply *r = fcall("move_claim", &dlq, -1, "r2", "10000", END);
    assert_true(has_code(r, "busy"));
    long long until = atoll(str_at(r, 1));
    freeReplyObject(r);
    wait_until_ms(until + 1);   /* r1 died: its lease runs out */
    r = fcall("move_claim", &dlq, -1, "r2", "10000", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 10);
    assert_true(atoll(str_at(r, 1)) >= until + 10000);   /* r2's lease */
    assert_int_equal(atoll(str_at(r, 2)), id);
    assert_string_equal(str_at(r, 3), "RUNNING");
    assert_string_equal(str_at(r, 4), "elsewhere");
    assert_string_equal(str_at(r, 8), "1");   /* to_move */
    freeReplyObject(r);
    report(&dlq, id, "r1", 1, "10000", "", "lost");
    report(&dlq, id, "r2", 0, "10000", "", "RUNNING");
    r = fcall("move_claim", &dlq, -1, "r3", "10000", END);
    assert_true(has_code(r, "busy"));
    freeReplyObject(r);
    /* Its own runner may claim it again (an instance that lost track). */
    r = fcall("move_claim", &dlq, -1, "r2", "10000", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    report(&dlq, id, "r2", 0, "10000", "release", "RUNNING");
    r = fcall("move_claim", &dlq, -1, "r3", "50", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    report(&dlq, id, "r2", 0, "10000", "", "lost");

    r = fcall("move_cancel", &dlq, -1, num(id), END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    wait_until_ms(redis_now_ms() + 60);   /* r3 dies before its batch ends */
    expect_code(fcall("move_claim", &dlq, -1, "r4", "10000", END), "none", NULL);
    task_t t[1];
    assert_int_equal(list_tasks(&dlq, 1, t, 1), 1);
    assert_string_equal(t[0].status, "CANCELLED");
    report(&dlq, id, "r3", 0, "10000", "COMPLETED", "lost");
}

/* A source keeps its 10 newest tasks; drop_queue deletes them. */
static void test_move_tasks_kept(void **state)
{
    (void)state;
    queue_t dlq;
    queue_init(&dlq, "mv-kept");
    for (int i = 1; i <= 12; i++) {
        long long id = start_task(&dlq, "", "0", "r1", "10000", NULL);
        assert_int_equal(id, i);
        report(&dlq, id, "r1", 0, "10000", "COMPLETED", "COMPLETED");
    }
    task_t t[10];
    assert_int_equal(list_tasks(&dlq, 10, t, 10), 10);
    assert_int_equal(t[0].id, 12);
    assert_int_equal(t[9].id, 3);
    assert_int_equal(exists(qkey(&dlq, "move:2")), 0);
    assert_int_equal(exists(qkey(&dlq, "move:3")), 1);
    assert_int_equal(list_tasks(&dlq, 2, t, 10), 2);
    redisReply *r;
    do {
        r = fcall("drop_queue", &dlq, -1, "unregistered", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        bool finished = strcmp(r->element[0]->str, "done") == 0;
        freeReplyObject(r);
        if (finished) break;
    } while (true);
    assert_int_equal(exists(qkey(&dlq, "moves")), 0);
    assert_int_equal(exists(qkey(&dlq, "move:12")), 0);
}

/* The registry's watch list: due sources with their score; a compare-and-
 * set on the score (a later start is not dropped by an older look). */
static void test_move_watch(void **state)
{
    (void)state;
    long long now = redis_now_ms();
    const char *add[] = { "mv-watch-a", num(now - 5), "" };
    expect_watch(add, "1");
    const char *later[] = { "mv-watch-b", num(now + 600000), "" };
    expect_watch(later, "1");
    const char *due_args[] = { "100" };
    redisReply *r = command_argv(5, (const char *[]){ "FCALL_RO", RD_FUNCTION("move_due"), "1",
                                                      REGISTRY, due_args[0] }, NULL);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(str_at(r, 0), "mv-watch-a");
    char seen[32];
    snprintf(seen, sizeof seen, "%s", str_at(r, 1));
    assert_int_equal(atoll(seen), now - 5);
    freeReplyObject(r);
    /* A start meanwhile moved it on: the stale drop does nothing. */
    char moved_on[32], stale[32];
    snprintf(moved_on, sizeof moved_on, "%lld", now + 10000);
    snprintf(stale, sizeof stale, "%s", seen);
    const char *restart[] = { "mv-watch-a", moved_on, "" };
    expect_watch(restart, "1");
    const char *drop_stale[] = { "mv-watch-a", "", stale };
    expect_watch(drop_stale, "0");
    const char *drop[] = { "mv-watch-a", "", moved_on };
    expect_watch(drop, "1");
    const char *drop_b[] = { "mv-watch-b", "", "" };
    expect_watch(drop_b, "1");
    r = command_argv(5, (const char *[]){ "FCALL_RO", RD_FUNCTION("move_due"), "1", REGISTRY,
                                          "100" }, NULL);
    assert_int_equal(r->elements, 0);
    freeReplyObject(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_task_lifecycle),
        cmocka_unit_test(test_move_task_takeover),
        cmocka_unit_test(test_move_tasks_kept),
        cmocka_unit_test(test_move_watch),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
