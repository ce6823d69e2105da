/* test_lua_upgrade.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: library versions side by side and the rolling upgrade
 * from retryd_v2 (docs/storage.md "Two generations of records"), and the
 * room the library leaves for more top-level locals.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_upgrade"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Versions side by side (rolling upgrade, docs/reference.md "Rolling upgrade")                         */
/* ------------------------------------------------------------------------ */

/* The names of the functions of library lib (FUNCTION LIST), comma-joined. */
static void library_functions(const char *lib, char *out, size_t cap, size_t *count)
{
    redisReply *r = rcmd("FUNCTION", "LIST", "LIBRARYNAME", lib, END);
    out[0] = '\0';
    *count = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *l = r->element[i];
        bool this_lib = false;
        const redisReply *fns = NULL;
        for (size_t j = 0; j + 1 < l->elements; j += 2) {
            if (strcmp(l->element[j]->str, "library_name") == 0)
                this_lib = strcmp(l->element[j + 1]->str, lib) == 0;
            if (strcmp(l->element[j]->str, "functions") == 0) fns = l->element[j + 1];
        }
        if (!this_lib || fns == NULL) continue;
        for (size_t k = 0; k < fns->elements; k++) {
            const redisReply *f = fns->element[k];
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                if (strcmp(f->element[j]->str, "name") != 0) continue;
                snprintf(out + strlen(out), cap - strlen(out), "%s%s", *count ? "," : "",
                         f->element[j + 1]->str);
                (*count)++;
            }
        }
    }
    freeReplyObject(r);
}

/* The library as RETRYD_TEST_LUA holds it, with its version renamed: what a
 * release with another API version loads. */
static char *library_as(const char *version_name, size_t *len)
{
    size_t n = 0;
    char *code = read_file(getenv("RETRYD_TEST_LUA"), &n);
    assert_non_null(code);
    code = realloc(code, n + 1);
    assert_non_null(code);
    code[n] = '\0';
    size_t from_len = strlen(RD_LIBRARY_NAME), to_len = strlen(version_name);
    assert_int_equal(from_len, to_len);  /* renamed in place */
    int renamed = 0;
    for (char *p = code; (p = strstr(p, RD_LIBRARY_NAME)) != NULL; p += from_len) {
        memcpy(p, version_name, to_len);
        renamed++;
    }
    assert_true(renamed >= 2);  /* the first line and LIBRARY (and comments) */
    *len = n;
    return code;
}

static void test_library_versions_side_by_side(void **state)
{
    /* Every function of the library carries its version. */
    char names[2048];
    size_t count;
    library_functions(RD_LIBRARY_NAME, names, sizeof names, &count);
    assert_true(count >= 15);
    for (char *p = names; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, RD_FUNCTION(""), strlen(RD_FUNCTION(""))) != 0)
            fail_msg("function %.40s is not versioned (%s)", p, names);
    assert_non_null(strstr(names, RD_FUNCTION("claim")));

    /* Another version loads beside it (its names do not collide), and both
     * answer on the same queue: enqueue through one, claim and succeed
     * through the other, as two daemons of two versions would. */
    size_t len;
    char *other = library_as("retryd_vX", &len);
    load_library(other, len, false, "retryd_vX");
    queue_t q;
    queue_init(&q, "versions");
    redisReply *r = rcmd("FCALL", "retryd_vX_enqueue", "1", q.base, "from vX", "3", "0", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "from vX");
    r = rcmd("FCALL", "retryd_vX_succeed", "2", q.base, mkey(&q, m.id), num(m.id),
             msg_str(&m, "lease_token"), END);
    expect_ok_msg(r, &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");

    /* A new daemon's FUNCTION LOAD REPLACE of its version leaves the other. */
    size_t n = 0;
    char *mine = read_file(getenv("RETRYD_TEST_LUA"), &n);
    load_library(mine, n, true, RD_LIBRARY_NAME);
    free(mine);
    library_functions("retryd_vX", names, sizeof names, &count);
    assert_true(count >= 15);
    r = rcmd("FCALL_RO", "retryd_vX_get", "2", q.base, mkey(&q, m.id), num(m.id), END);
    expect_ok_msg(r, &m);

    /* The unversioned library of older releases ("retryd", functions named
     * "claim", ...) coexists too; FUNCTION DELETE ends an old version. */
    const char *old = "#!lua name=retryd\n"
                      "redis.register_function('claim', function() return { 'old' } end)\n";
    load_library(old, strlen(old), true, "retryd");
    load_library(other, len, true, "retryd_vX");
    r = rcmd("FCALL", "claim", "1", q.base, END);
    expect_code(r, "old", NULL);
    expect_nothing_to_claim(&q);  /* the current version's claim is its own */
    r = rcmd("FUNCTION", "DELETE", "retryd_vX", END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = rcmd("FUNCTION", "DELETE", "retryd", END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = rcmd("FCALL", "retryd_vX_claim", "1", q.base, "30000", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    expect_nothing_to_claim(&q);
    free(other);
}

/* Room to grow (docs/design.md "The Functions library"): Lua 5.1 refuses a
 * chunk with more than 200 active locals, and the library is one chunk. With
 * 100 more top-level locals after its "#!lua" line it still loads (it held
 * 193 of them before it was split into modules); then the real library is
 * loaded again, so the tests after this one are unaffected. */
static void test_library_has_room_for_100_locals(void **state)
{
    enum { EXTRA = 100 };
    size_t n = 0;
    char *code = read_file(getenv("RETRYD_TEST_LUA"), &n);
    assert_non_null(code);
    const char *eol = memchr(code, '\n', n);
    assert_non_null(eol);
    size_t head = (size_t)(eol - code) + 1;
    size_t cap = n + EXTRA * 40 + 1, len = head;
    char *grown = malloc(cap);
    assert_non_null(grown);
    memcpy(grown, code, head);
    for (int i = 0; i < EXTRA; i++)
        len += (size_t)snprintf(grown + len, cap - len, "local room_test_%d = %d\n", i, i);
    memcpy(grown + len, code + head, n - head);
    len += n - head;
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", grown };
    const size_t lens[] = { 8, 4, 7, len };
    redisReply *r = command_argv(4, argv, lens);
    bool loaded = r->type == REDIS_REPLY_STRING && strcmp(r->str, RD_LIBRARY_NAME) == 0;
    char why[256];
    snprintf(why, sizeof why, "%s", reply_desc(r));
    freeReplyObject(r);
    free(grown);
    load_library(code, n, true, RD_LIBRARY_NAME);
    free(code);
    if (!loaded) fail_msg("the library with %d more top-level locals: %s", EXTRA, why);
    queue_t q;
    queue_init(&q, "room");
    msg_t m;
    enqueue_ok(&q, "after the reload", 3, 0);
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "after the reload");
}

/* ------------------------------------------------------------------------ */
/* Rolling upgrade from retryd_v2 (docs/storage.md "Two generations of      */
/* indexes"): the previous release's library, main's lua/ before the record, */
/* loaded beside this one in the same Redis.                                 */
/* ------------------------------------------------------------------------ */

/* The message as `get` of one library answers it. */
static void get_with(bool v2, const queue_t *q, long long id, msg_t *m)
{
    redisReply *r = v2 ? fcall_v2("get", q, id, END) : fcall("get", q, id, END);
    expect_ok_msg(r, m);
}

/* Both messages hold the same fields with the same values. */
static void assert_same_fields(const msg_t *want, const msg_t *got)
{
    assert_int_equal(want->id, got->id);
    for (int i = 0; i < want->nfields; i++) {
        const field_t *f = msg_field(got, want->f[i].name);
        if (f == NULL)
            fail_msg("message %lld: %s missing (retryd_v2 showed \"%s\")", want->id,
                     want->f[i].name, want->f[i].value);
        if (f->len != want->f[i].len || memcmp(f->value, want->f[i].value, f->len) != 0)
            fail_msg("message %lld: %s is \"%s\", retryd_v2 showed \"%s\"", want->id,
                     want->f[i].name, f->value, want->f[i].value);
    }
    if (got->nfields != want->nfields)
        fail_msg("message %lld: %d fields, retryd_v2 showed %d", want->id, got->nfields,
                 want->nfields);
}

/* The loss of a mixed deployment: a retryd_v2 claim that met a record popped
 * its id from the shared ready list, failed with WRONGTYPE after the pop (no
 * rollback), and the message was in no index any more. Now retryd_v2 sees
 * none of the record's ids: it claims nothing, the message stays whole, and
 * retryd_v3 claims it. retryd_v2's by-id calls on a record answer an error
 * and write nothing. */
static void test_v2_claim_never_meets_a_record(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2claim");
    long long id = enqueue_ok(&q, "written by v3", 3, 0);
    redisReply *r = fcall_v2("claim", &q, -1, "30000", "10", END);
    if (!has_code(r, "ok") || r->elements != 1)
        fail_msg("retryd_v2_claim on a queue of records: %s", reply_desc(r));
    freeReplyObject(r);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "written by v3");
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);

    redisReply *before = rcmd("GET", mkey(&q, id), END);
    r = fcall_v2("succeed", &q, id, msg_str(&m, "lease_token"), END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = fcall_v2("fail", &q, id, msg_str(&m, "lease_token"), "e", "1", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisReply *after = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(before->len, after->len);
    assert_memory_equal(before->str, after->str, before->len);
    freeReplyObject(before);
    freeReplyObject(after);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_generations_apart(&q);
}

/* Messages retryd_v2 wrote in every state are shown by retryd_v3 with every
 * field retryd_v2 shows, claimed, settled with retryd_v2's lease tokens,
 * replayed, and ticked (promotion, an expired lease, retention); each moves
 * into the new indexes with its record rewritten in the same call. */
static void test_v2_messages_served_by_v3(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2mixed");
    msg_t m, c_lease, f_lease;
    long long c = v2_enqueue(&q, "c lease", "3", "0", "");
    v2_claim(&q, "600000", c, &c_lease);
    long long d = v2_enqueue(&q, "d done", "3", "0", "");
    v2_claim(&q, "600000", d, &m);
    expect_ok_msg(fcall_v2("succeed", &q, d, msg_str(&m, "lease_token"), END), &m);
    long long e = v2_enqueue(&q, "e dead", "1", "0", "");
    v2_claim(&q, "600000", e, &m);
    expect_ok_msg(fcall_v2("fail", &q, e, msg_str(&m, "lease_token"), "boom", "0", "-1", END), &m);
    long long f = v2_enqueue(&q, "f fails", "3", "0", "");
    v2_claim(&q, "600000", f, &f_lease);
    long long g = v2_enqueue(&q, "g expires", "3", "0", "");
    v2_claim(&q, "1", g, &m);
    long long h = v2_enqueue(&q, "h released", "3", "0", "");
    msg_t h_lease;
    v2_claim(&q, "600000", h, &h_lease);
    long long a = v2_enqueue(&q, "a now", "3", "0", "key-a");
    long long b = v2_enqueue(&q, "b later", "3", "3600000", "");
    const long long all[] = { a, b, c, d, e, f, g, h };
    static const char *const status[] = { "pending", "pending", "processing", "succeeded",
                                          "dead", "processing", "processing", "processing" };

    /* get: every field retryd_v2 shows, as it shows it; list and export: each
     * once, in its state. Reads change nothing. */
    for (size_t i = 0; i < 8; i++) {
        msg_t old;
        get_with(true, &q, all[i], &old);
        get_with(false, &q, all[i], &m);
        assert_same_fields(&old, &m);
        assert_string_equal(msg_str(&m, "status"), status[i]);
        assert_string_equal(key_type(mkey(&q, all[i])), "hash");
    }
    expect_ok_msg(fcall("get", &q, a, END), &m);
    assert_string_equal(msg_str(&m, "idempotency_key"), "key-a");
    expect_ok_msg(fcall("get", &q, c, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), msg_str(&c_lease, "lease_token"));
    long long ids[16], bytes;
    char next[256];
    size_t n = raw_page(fcall("list", &q, -1, "", "100", "", END), ids, 16, &bytes, next,
                        sizeof next);
    assert_int_equal(n, 8);
    assert_string_equal(next, "");
    for (size_t i = 0; i < 8; i++) {
        size_t seen = 0;
        for (size_t j = 0; j < n; j++) seen += ids[j] == all[i];
        assert_int_equal(seen, 1);
    }
    static const char *const states[] = { "pending", "processing", "succeeded", "dead" };
    static const size_t in_state[] = { 2, 4, 1, 1 };
    for (size_t s = 0; s < 4; s++) {
        n = raw_page(fcall("list", &q, -1, states[s], "100", "", END), ids, 16, &bytes, next,
                     sizeof next);
        assert_int_equal(n, in_state[s]);
    }
    n = raw_export(fcall("export", &q, -1, "csv", "", "100", "", END), ids, 16, &bytes, next,
                   sizeof next);
    assert_int_equal(n, 8);
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    assert_int_equal(r->elements, 2);
    char line[64];
    snprintf(line, sizeof line, "%lld,dead,1,1,", e);
    assert_non_null(strstr(r->element[1]->str, line));
    assert_non_null(strstr(r->element[1]->str, ",boom,e dead"));
    freeReplyObject(r);
    r = fcall("stats", &q, -1, "10", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    static const char *const counts[] = { "pending", "processing", "succeeded", "dead" };
    for (size_t s = 0; s < 4; s++)
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            if (strcmp(r->element[i]->str, counts[s]) == 0)
                assert_int_equal(r->element[i + 1]->integer, (long long)in_state[s]);
    freeReplyObject(r);
    for (size_t i = 0; i < 8; i++)
        assert_string_equal(key_type(mkey(&q, all[i])), "hash");

    /* enqueue with a's idempotency key: the original, as retryd_v2 has it. */
    r = fcall("enqueue", &q, -1, "again", "3", "0", "key-a", END);
    assert_true(has_code(r, "duplicate"));
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_int_equal(m.id, a);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "a now");

    /* release of a retryd_v2 lease through retryd_v3 (a long-poll client of a
     * v3 instance cannot hold one, but the function takes any): h is lifted
     * under its lease, then handed back to the front of the new due list. */
    r = fcall("release", &q, -1, num(h), "1.1", END);
    assert_int_equal(int_reply(r), 0);
    assert_string_equal(key_type(mkey(&q, h)), "hash");
    r = fcall("release", &q, -1, num(h), msg_str(&h_lease, "lease_token"), END);
    assert_int_equal(int_reply(r), 1);
    assert_string_equal(key_type(mkey(&q, h)), "string");
    expect_ok_msg(fcall("get", &q, h, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "h released");
    claim_one(&q, 600000, &m);
    assert_int_equal(m.id, h);
    expect_ok_msg(fcall("succeed", &q, h, msg_str(&m, "lease_token"), END), &m);

    /* claim: the pending one (b is scheduled an hour away), a record now. */
    msg_t got[4];
    n = expect_ok_msgs(fcall("claim", &q, -1, "600000", "4", END), got, 4);
    assert_int_equal(n, 1);
    assert_int_equal(got[0].id, a);
    assert_string_equal(msg_str(&got[0], "payload"), "a now");
    assert_string_equal(msg_str(&got[0], "idempotency_key"), "key-a");
    assert_string_equal(key_type(mkey(&q, a)), "string");
    assert_generations_apart(&q);

    /* retryd_v2's lease tokens settle through retryd_v3. */
    expect_code(fcall("succeed", &q, c, "1.1", END), "lease_mismatch", NULL);
    expect_ok_msg(fcall("succeed", &q, c, msg_str(&c_lease, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "payload"), "c lease");
    assert_string_equal(key_type(mkey(&q, c)), "string");
    expect_ok_msg(fcall("fail", &q, f, msg_str(&f_lease, "lease_token"), "oops", "1", "0", END),
                  &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "oops");
    /* ... and retryd_v2 now answers an error for them, before any write. */
    r = fcall_v2("get", &q, c, END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);

    /* replay of retryd_v2's dead letter. */
    expect_ok_msg(fcall("replay", &q, e, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_no_field(&m, "last_error");
    assert_string_equal(key_type(mkey(&q, e)), "string");
    assert_generations_apart(&q);

    /* tick: b made due by hand (test setup), g's 1 ms lease expires, d is past
     * a 1 ms retention. Ticks until all three are done (bounded). */
    assert_int_equal(int_reply(rcmd("ZADD", qkey(&q, "scheduled"), "XX", "CH", "0", num(b), END)), 1);
    long long promoted = 0, reclaimed = 0, expired = 0;
    for (int round = 0; round < 2000 && (promoted < 1 || reclaimed < 1 || expired < 1); round++) {
        long long t[5];
        expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), 5, t);
        promoted += t[0], reclaimed += t[1], expired += t[2];
    }
    assert_true(promoted >= 1 && reclaimed == 1 && expired >= 1);  /* c's 1 ms too */
    expect_code(fcall("get", &q, d, END), "not_found", NULL);
    expect_ok_msg(fcall("get", &q, g, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(key_type(mkey(&q, g)), "string");
    expect_ok_msg(fcall("get", &q, b, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "b later");

    /* Claimable now: e (replayed), f (retry due at once), b (promoted). */
    msg_t more[8];
    n = expect_ok_msgs(fcall("claim", &q, -1, "600000", "8", END), more, 8);
    assert_int_equal(n, 3);
    bool saw_b = false;
    for (size_t i = 0; i < n; i++) {
        saw_b |= more[i].id == b;
        assert_string_equal(key_type(mkey(&q, more[i].id)), "string");
    }
    assert_true(saw_b);
    /* Nothing is left in retryd_v2's indexes but g... which is in the new
     * schedule now: all of them are empty. */
    static const char *const old[] = { "ready", "due", "scheduled", "processing", "succeeded",
                                       "dead" };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(exists(qkey(&q, old[i])), 0);
    assert_generations_apart(&q);
}

/* A retryd_v2 instance keeps enqueuing while retryd_v3 has a backlog of its
 * own: the timer's tick lifts the old ids onto the claim end, so they are
 * claimed next, not after the backlog; while retryd_v2's indexes exist the
 * queue stays on the timer's schedule (at most OLD_REVISIT_MS away), and
 * the tick empties them, finished messages included. */
static void test_v2_enqueues_not_starved(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2starve");
    for (int i = 0; i < 300; i++)
        enqueue_ok(&q, "backlog", 3, 0);
    long long v2ids[5];
    for (int i = 0; i < 5; i++)
        v2ids[i] = v2_enqueue(&q, "from v2", "3", "0", "");
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "backlog");

    long long t[TICK_ROUND_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, t);
    assert_int_equal(t[0], 5);                 /* lifted */
    assert_true(t[3] >= 0 && t[3] <= 1000);    /* comes back soon */
    assert_int_equal(t[5], 0);                 /* not empty */
    msg_t got[5];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "5", END), got, 5);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(got[i].id, v2ids[i]);  /* oldest first */
        assert_string_equal(msg_str(&got[i], "payload"), "from v2");
    }

    /* More from retryd_v2 later: bounded ticks bring it in too. */
    long long late = v2_enqueue(&q, "late v2", "3", "0", "");
    int ticks = 0;
    do {
        expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, t);
        ticks++;
    } while (t[0] == 0 && ticks < 3);
    assert_int_equal(t[0], 1);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, late);

    /* A queue that holds only retryd_v2's messages stays on the schedule
     * (a v2 instance may keep enqueuing without any hint). */
    queue_t only;
    queue_init(&only, "v2only");
    long long z = v2_enqueue(&only, "z", "1", "0", "");
    v2_claim(&only, "30000", z, &m);
    expect_ok_msg(fcall_v2("fail", &only, z, msg_str(&m, "lease_token"), "gone", "0", "-1", END),
                  &m);
    msg_t dead_before;
    get_with(true, &only, z, &dead_before);
    v2_enqueue(&only, "x", "3", "0", "");
    v2_enqueue(&only, "y", "3", "0", "");
    assert_generations_apart(&only);
    expect_ints(fcall("tick", &only, -1, "100", "0", "0", "1", END), TICK_ROUND_N, t);
    assert_int_equal(t[0], 2);
    assert_true(t[3] >= 0 && t[3] <= 1000);
    assert_int_equal(t[5], 0);
    /* Everything was lifted, the dead letter kept forever too (dead_ttl 0),
     * with its time of death: retryd_v2's indexes are gone, and the queue
     * is back to ticks only when it has timer work. */
    static const char *const old[] = { "ready", "due", "scheduled", "processing", "succeeded",
                                       "dead" };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(exists(qkey(&only, old[i])), 0);
    get_with(false, &only, z, &m);
    assert_same_fields(&dead_before, &m);
    assert_string_equal(key_type(mkey(&only, z)), "string");
    expect_ints(fcall("tick", &only, -1, "100", "0", "0", "1", END), TICK_ROUND_N, t);
    assert_int_equal(t[3], -1);
    assert_int_equal(t[4], 2);
    assert_generations_apart(&q);
    assert_generations_apart(&only);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library_versions_side_by_side),
        cmocka_unit_test(test_library_has_room_for_100_locals),
        cmocka_unit_test(test_v2_claim_never_meets_a_record),
        cmocka_unit_test(test_v2_messages_served_by_v3),
        cmocka_unit_test(test_v2_enqueues_not_starved),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
