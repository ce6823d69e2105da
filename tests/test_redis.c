/* test_redis.c - src/redis.c in process: one rd_redis_t on a real libuv
 * loop, against the redis-server of scripts/test.sh, a private redis-server
 * the test pauses and kills, and a fake RESP server (unit_support.h) for the
 * reconnect backoff. Covers connect, commands and each reply type, the
 * library's reload on "Function not found", the per-command deadline
 * (SIGSTOP: LOST, outcome unknown), a link dropped by a killed Redis, and
 * reconnection with backoff (README "Redis connection"; docs/design.md). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit_support.h"

/* ------------------------------------------------------------------------ */
/* What a command's callback saw                                            */
/* ------------------------------------------------------------------------ */

typedef struct got {
    bool done;
    int calls;
    rd_redis_status_t status;
    rd_reply_type_t type;
    char str[256];
    long long integer;
    size_t elements;
    char first[64];       /* an array's first element */
    long long at_ms;      /* e2e_mono_ms of the callback */
} got_t;

static void on_got(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    got_t *g = arg;
    g->calls++;
    g->done = true;
    g->status = status;
    g->at_ms = e2e_mono_ms();
    g->type = rd_reply_type(reply);
    size_t len = 0;
    const char *s = rd_reply_str(reply, &len);
    if (s) snprintf(g->str, sizeof g->str, "%.*s", (int)len, s);
    rd_reply_int(reply, &g->integer);
    g->elements = rd_reply_len(reply);
    s = rd_reply_str(rd_reply_at(reply, 0), &len);
    if (s) snprintf(g->first, sizeof g->first, "%.*s", (int)len, s);
}

static int send_v(rd_redis_t *r, got_t *g, int argc, const char **argv)
{
    size_t lens[16];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    memset(g, 0, sizeof *g);
    return rd_redis_command(r, argc, argv, lens, on_got, g);
}

#define SEND(r, g, ...)                                                          \
    send_v((r), (g), (int)(sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(char *)), \
           (const char *[]){ __VA_ARGS__ })

typedef struct link {
    uv_loop_t loop;
    rd_redis_t *r;
    bool closed;
    int ready_calls;
} link_t;

static void on_ready(void *arg)
{
    ((link_t *)arg)->ready_calls++;
}

static void on_closed(void *arg)
{
    ((link_t *)arg)->closed = true;
}

static void link_open(link_t *l, int port, int timeout_ms, const char *library)
{
    memset(l, 0, sizeof *l);
    assert_int_equal(uv_loop_init(&l->loop), 0);
    rd_redis_options_t ro = {
        .host = "127.0.0.1", .port = port, .timeout_ms = timeout_ms, .library = library,
        .on_ready = on_ready, .on_ready_arg = l,
    };
    l->r = rd_redis_start(&l->loop, &ro);
}

static void link_close(link_t *l)
{
    rd_redis_close(l->r, true, on_closed, l);
    assert_true(ut_run_until(&l->loop, l->closed, 5000));
    ut_loop_close(&l->loop);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* Connects, loads the library, and hands each reply type to the callback. */
static void test_connect_command_and_reply_types(void **state)
{
    (void)state;
    link_t l;
    link_open(&l, ut_test_redis_port(), 5000, rd_lua_library);
    assert_false(rd_redis_ready(l.r));
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));
    assert_int_equal(l.ready_calls, 1);
    assert_true(rd_redis_attempted(l.r));

    char key[64];
    e2e_queue_name(key, sizeof key, "rk");
    got_t ping, set, get, missing, push, range, incr, bad;
    assert_int_equal(SEND(l.r, &ping, "PING"), 0);
    assert_int_equal(SEND(l.r, &set, "SET", key, "v"), 0);
    assert_int_equal(SEND(l.r, &get, "GET", key), 0);
    char list[80], counter[80], none[80];
    snprintf(list, sizeof list, "%s:l", key);
    snprintf(counter, sizeof counter, "%s:n", key);
    snprintf(none, sizeof none, "%s:none", key);
    assert_int_equal(SEND(l.r, &missing, "GET", none), 0);
    assert_int_equal(SEND(l.r, &push, "RPUSH", list, "a", "b", "c"), 0);
    assert_int_equal(SEND(l.r, &range, "LRANGE", list, "0", "-1"), 0);
    assert_int_equal(SEND(l.r, &incr, "INCRBY", counter, "41"), 0);
    assert_int_equal(SEND(l.r, &bad, "NOSUCHCOMMAND"), 0);
    assert_true(ut_run_until(&l.loop, bad.done, 5000));

    assert_int_equal(ping.status, RD_REDIS_OK);
    assert_int_equal(ping.type, RD_REPLY_STATUS);
    assert_string_equal(ping.str, "PONG");
    assert_int_equal(set.type, RD_REPLY_STATUS);
    assert_int_equal(get.type, RD_REPLY_STRING);
    assert_string_equal(get.str, "v");
    assert_int_equal(missing.type, RD_REPLY_NIL);
    assert_int_equal(push.type, RD_REPLY_INTEGER);
    assert_int_equal(push.integer, 3);
    assert_int_equal(range.type, RD_REPLY_ARRAY);
    assert_int_equal(range.elements, 3);
    assert_string_equal(range.first, "a");
    assert_int_equal(incr.integer, 41);
    assert_int_equal(bad.status, RD_REDIS_OK);
    assert_int_equal(bad.type, RD_REPLY_ERROR);
    assert_non_null(strstr(bad.str, "unknown command"));
    /* Each callback ran exactly once, in order. */
    got_t *all[] = { &ping, &set, &get, &missing, &push, &range, &incr, &bad };
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(all[i]->calls, 1);
        if (i) assert_true(all[i]->at_ms >= all[i - 1]->at_ms);
    }
    assert_true(rd_redis_rtt(l.r)->count >= 8);
    link_close(&l);
}

/* Not READY: the call fails at once and its callback never runs. */
static void test_command_while_not_ready_fails_at_once(void **state)
{
    (void)state;
    fake_start(FAKE_REFUSE, NULL);
    link_t l;
    link_open(&l, g_fake.port, 1000, rd_lua_library);
    got_t g;
    assert_int_equal(SEND(l.r, &g, "PING"), -1);
    assert_true(ut_run_until(&l.loop, atomic_load(&g_fake.accepts) >= 2, 5000));
    assert_false(rd_redis_ready(l.r));
    assert_true(rd_redis_attempted(l.r));
    assert_int_equal(SEND(l.r, &g, "PING"), -1);
    ut_run_for(&l.loop, 50);
    assert_int_equal(g.calls, 0);
    link_close(&l);
    fake_stop();
}

/* "Function not found" (FUNCTION DELETE): the library is loaded again and
 * the FCALL resent once; the function then answers for itself. */
static void test_missing_library_is_loaded_again(void **state)
{
    (void)state;
    link_t l;
    link_open(&l, ut_test_redis_port(), 5000, rd_lua_library);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));
    got_t del, call, list;
    assert_int_equal(SEND(l.r, &del, "FUNCTION", "DELETE", "retryd_v9"), 0);
    assert_int_equal(SEND(l.r, &call, "FCALL", "retryd_v9_get", "0"), 0);
    assert_true(ut_run_until(&l.loop, call.done, 5000));
    assert_int_equal(del.type, RD_REPLY_STATUS);
    assert_int_equal(call.status, RD_REDIS_OK);
    assert_int_equal(call.type, RD_REPLY_ERROR);
    /* The reloaded function refused the missing KEYS: it ran. */
    assert_null(strstr(call.str, "Function not found"));
    assert_non_null(strstr(call.str, "retryd_v9_get takes 2 keys"));
    assert_int_equal(SEND(l.r, &list, "FUNCTION", "LIST", "LIBRARYNAME", "retryd_v9"), 0);
    assert_true(ut_run_until(&l.loop, list.done, 5000));
    assert_int_equal(list.elements, 1);
    link_close(&l);
}

/* Redis keeps answering "Function not found" (the reload did not take):
 * the FCALL is resent once, then its error is the answer; never a loop. */
static void test_missing_function_resent_only_once(void **state)
{
    (void)state;
    fake_start(FAKE_ANSWER, "-ERR Function not found\r\n");
    link_t l;
    link_open(&l, g_fake.port, 2000, rd_lua_library);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 5000));
    got_t call;
    assert_int_equal(SEND(l.r, &call, "FCALL", "retryd_v9_get", "0"), 0);
    assert_true(ut_run_until(&l.loop, call.done, 5000));
    assert_int_equal(call.status, RD_REDIS_OK);
    assert_int_equal(call.type, RD_REPLY_ERROR);
    assert_string_equal(call.str, "ERR Function not found");
    ut_run_for(&l.loop, 100);
    assert_int_equal(call.calls, 1);
    assert_int_equal(atomic_load(&g_fake.commands), 2);   /* sent, resent once */
    /* A plain command is never resent. */
    got_t get;
    assert_int_equal(SEND(l.r, &get, "GET", "k"), 0);
    assert_true(ut_run_until(&l.loop, get.done, 5000));
    ut_run_for(&l.loop, 100);
    assert_int_equal(atomic_load(&g_fake.commands), 3);
    link_close(&l);
    fake_stop();
}

/* A command Redis does not answer within timeout_ms (SIGSTOP): the link is
 * dropped and it completes LOST; once Redis runs again the link is READY
 * again and commands are answered. */
static void test_timeout_answers_lost_then_ready_again(void **state)
{
    (void)state;
    fx_redis_t srv;
    assert_int_equal(fx_redis_start(&srv, NULL), 0);
    link_t l;
    link_open(&l, srv.port, 300, rd_lua_library);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));

    assert_int_equal(fx_redis_pause(&srv), 0);
    got_t a, b;
    long long sent = e2e_mono_ms();
    assert_int_equal(SEND(l.r, &a, "PING"), 0);
    assert_int_equal(SEND(l.r, &b, "INCR", "unit:redis:n"), 0);
    assert_true(ut_run_until(&l.loop, b.done, 5000));
    long long took = a.at_ms - sent;
    assert_int_equal(a.status, RD_REDIS_LOST);
    assert_int_equal(b.status, RD_REDIS_LOST);
    assert_int_equal(a.type, RD_REPLY_NIL);   /* no reply */
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    /* Not before the deadline; within it and one watchdog period (75 ms)
     * plus slack for a loaded machine. */
    assert_true(took >= 290);
    assert_true(took < 1500);
    assert_false(rd_redis_ready(l.r));
    got_t c;
    assert_int_equal(SEND(l.r, &c, "PING"), -1);

    /* Stopped, Redis still accepts connections (the kernel's backlog): the
     * handshake's deadline ends each attempt. Running again, it answers. */
    ut_run_for(&l.loop, 400);
    assert_false(rd_redis_ready(l.r));
    assert_int_equal(fx_redis_resume(&srv), 0);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));
    assert_int_equal(l.ready_calls, 2);
    assert_int_equal(SEND(l.r, &c, "PING"), 0);
    assert_true(ut_run_until(&l.loop, c.done, 5000));
    assert_int_equal(c.status, RD_REDIS_OK);
    assert_string_equal(c.str, "PONG");
    link_close(&l);
    fx_redis_destroy(&srv);
}

/* Redis killed with a command in flight: LOST at once (well before the
 * deadline); restarted empty, the link comes back and loads the library. */
static void test_restart_drops_then_reconnects_with_library(void **state)
{
    (void)state;
    fx_redis_t srv;
    assert_int_equal(fx_redis_start(&srv, NULL), 0);
    link_t l;
    link_open(&l, srv.port, 5000, rd_lua_library);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));

    /* Stopped first, so the command is surely in flight when it dies. */
    assert_int_equal(fx_redis_pause(&srv), 0);
    got_t a;
    assert_int_equal(SEND(l.r, &a, "PING"), 0);
    uv_run(&l.loop, UV_RUN_NOWAIT);   /* written */
    long long killed = e2e_mono_ms();
    assert_int_equal(fx_redis_stop(&srv, SIGKILL, 5000), 0);
    assert_true(ut_run_until(&l.loop, a.done, 3000));
    assert_int_equal(a.status, RD_REDIS_LOST);
    assert_true(a.at_ms - killed < 2000);   /* the drop, not the 5 s deadline */
    assert_false(rd_redis_ready(l.r));

    assert_int_equal(fx_redis_restart(&srv), 0);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));
    assert_int_equal(l.ready_calls, 2);
    got_t call;
    assert_int_equal(SEND(l.r, &call, "FCALL", "retryd_v9_get", "0"), 0);
    assert_true(ut_run_until(&l.loop, call.done, 5000));
    assert_non_null(strstr(call.str, "retryd_v9_get takes 2 keys"));
    link_close(&l);
    fx_redis_destroy(&srv);
}

/* Each failed attempt doubles the wait (100 ms, 200, 400, 800, ...); READY
 * resets it, so a link dropped later is retried after 100 ms again. */
static void test_reconnect_backoff_doubles_and_resets(void **state)
{
    (void)state;
    fake_start(FAKE_REFUSE, NULL);
    link_t l;
    link_open(&l, g_fake.port, 1000, rd_lua_library);
    ut_run_for(&l.loop, 1700);
    int n = atomic_load(&g_fake.accepts);
    /* Attempts at about 0, 100, 300, 700 and 1500 ms; a fixed 100 ms retry
     * would make 17. */
    assert_in_range(n, 4, 6);
    long long gap0 = g_fake.accept_ms[1] - g_fake.accept_ms[0];
    long long gap2 = g_fake.accept_ms[3] - g_fake.accept_ms[2];
    assert_true(gap0 >= 80);
    assert_true(gap2 >= 2 * gap0);

    /* The server answers now: READY at the next attempt (within 1.6 s). */
    fake_answer("+OK\r\n");
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 5000));
    /* A command drops the link: the next attempt comes after 100 ms. */
    atomic_store(&g_fake.mode, FAKE_DROP);
    int before = atomic_load(&g_fake.accepts);
    got_t g;
    assert_int_equal(SEND(l.r, &g, "GET", "x"), 0);
    assert_true(ut_run_until(&l.loop, g.done, 3000));
    long long dropped = e2e_mono_ms();
    assert_int_equal(g.status, RD_REDIS_LOST);
    assert_true(ut_run_until(&l.loop, atomic_load(&g_fake.accepts) > before, 3000));
    assert_true(g_fake.accept_ms[before] - dropped < 600);
    link_close(&l);
    fake_stop();
}

/* A chain of PINGs, each sent from a timer callback that its predecessor's
 * reply started, with no other timer or I/O to wake the loop. */
typedef struct ping_chain {
    uv_loop_t *loop;
    rd_redis_t *r;
    uv_timer_t next;
    int left;
    long long done_ms;
} ping_chain_t;

static void chain_send(uv_timer_t *t);

static void chain_got(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    ping_chain_t *c = arg;
    assert_int_equal(status, RD_REDIS_OK);
    assert_int_equal(rd_reply_type(reply), RD_REPLY_STATUS);
    if (--c->left > 0) {
        uv_timer_start(&c->next, chain_send, 0, 0);
        return;
    }
    c->done_ms = e2e_mono_ms();
    uv_stop(c->loop);
}

static void chain_send(uv_timer_t *t)
{
    ping_chain_t *c = t->data;
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    assert_int_equal(rd_redis_command(c->r, 1, argv, lens, chain_got, c), 0);
}

static void on_chain_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* A command queued by a timer callback goes out before the loop sleeps in
 * its poll: before the fix it waited for the next wake-up (the link's 250 ms
 * watchdog), so the promoter's rounds ran every 250 ms whatever --tick-ms
 * said. Ten PINGs, each from a timer, take a few ms on a local Redis; with
 * the bug they took about 2.5 s (bound: 500 ms). */
static void test_command_from_timer_sent_before_the_loop_sleeps(void **state)
{
    (void)state;
    link_t l;
    link_open(&l, ut_test_redis_port(), 5000, rd_lua_library);
    assert_true(ut_run_until(&l.loop, rd_redis_ready(l.r), 10000));
    ping_chain_t c = { .loop = &l.loop, .r = l.r, .left = 10 };
    uv_timer_init(&l.loop, &c.next);
    c.next.data = &c;
    uv_timer_t guard;
    uv_timer_init(&l.loop, &guard);
    uv_timer_start(&guard, on_chain_guard, 5000, 0);
    long long t0 = e2e_mono_ms();
    uv_timer_start(&c.next, chain_send, 0, 0);
    uv_run(&l.loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_close((uv_handle_t *)&c.next, NULL);
    assert_int_equal(c.left, 0);
    printf("test_redis: 10 PINGs sent from timer callbacks answered in %lld ms\n",
           c.done_ms - t0);
    if (c.done_ms - t0 > 500)
        fail_msg("10 PINGs from timer callbacks took %lld ms (a command queued by a timer "
                 "waited for the loop's next wake-up)", c.done_ms - t0);
    link_close(&l);
}

int main(void)
{
    rd_log_set_level(RD_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_command_and_reply_types),
        cmocka_unit_test(test_command_while_not_ready_fails_at_once),
        cmocka_unit_test(test_missing_library_is_loaded_again),
        cmocka_unit_test(test_missing_function_resent_only_once),
        cmocka_unit_test(test_timeout_answers_lost_then_ready_again),
        cmocka_unit_test(test_restart_drops_then_reconnects_with_library),
        cmocka_unit_test(test_reconnect_backoff_doubles_and_resets),
        cmocka_unit_test(test_command_from_timer_sent_before_the_loop_sleeps),
    };
    if (ut_test_redis_port() == 0) {
        fprintf(stderr, "test_redis: RETRYD_TEST_REDIS_PORT is not set (run it through scripts/test.sh)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
