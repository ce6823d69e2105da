/* test_lua_batch.c - enqueue_many (lua/10_enqueue.lua; docs/design.md, the
 * Functions library table; docs/reference.md "Batch enqueue"): a call of N
 * items leaves exactly what N enqueues leave (records, indexes, counters,
 * replies), in order (a key repeated in the call makes the later item a
 * duplicate), with each item's own outcome (too_large, not_found,
 * invalid_state) among the others; the bounds refused with an error reply
 * and nothing written; the clock read and the wake channel published once
 * per call; the originals that duplicates answer bounded by the reply's
 * bytes; and the previous release's library beside it. */
#define LUA_SUITE "test_lua_batch"
#include "lua_support.h"

/* One item: enqueue's ARGV[1..12], NULL for "". */
typedef struct item {
    const char *payload;
    size_t payload_len;      /* 0: strlen */
    const char *max_retries, *delay_ms, *idem, *hint, *origin, *ttl_ms, *priority, *group;
    const char *attributes, *window, *flags;
} item_t;

enum { ITEM_ARGS = 12, MANY_MAX = 100 };

static void item_argv(const item_t *it, const char **argv, size_t *lens)
{
    const char *v[ITEM_ARGS] = { it->payload, it->max_retries ? it->max_retries : "3",
                                 it->delay_ms, it->idem, it->hint ? it->hint : "1",
                                 it->origin ? it->origin : "default", it->ttl_ms, it->priority,
                                 it->group, it->attributes, it->window, it->flags };
    for (size_t i = 0; i < ITEM_ARGS; i++) {
        argv[i] = v[i] ? v[i] : "";
        /* A payload given by its length need not end in a NUL. */
        lens[i] = i == 0 && it->payload_len ? it->payload_len : strlen(argv[i]);
    }
}

/* FCALL enqueue_many n width, then the items: width 9 (enqueue's ARGV[1..9])
 * unless an item gives attributes, a window or flags (12), as the store
 * sends them. Caller frees. */
static redisReply *many(const queue_t *q, size_t n, const item_t *items)
{
    size_t width = 9;
    for (size_t i = 0; i < n; i++)
        if (items[i].attributes || items[i].window || items[i].flags) width = ITEM_ARGS;
    size_t nargs = 2 + width * n;
    const char **argv = calloc(nargs, sizeof *argv);
    size_t *lens = calloc(nargs, sizeof *lens);
    argv[0] = num((long long)n);
    lens[0] = strlen(argv[0]);
    argv[1] = width == 9 ? "9" : "12";
    lens[1] = strlen(argv[1]);
    for (size_t i = 0; i < n; i++) {
        const char *one_argv[ITEM_ARGS];
        size_t one_lens[ITEM_ARGS];
        item_argv(&items[i], one_argv, one_lens);
        memcpy(argv + 2 + width * i, one_argv, width * sizeof *argv);
        memcpy(lens + 2 + width * i, one_lens, width * sizeof *lens);
    }
    redisReply *r = fcall_bin("enqueue_many", q, -1, nargs, argv, lens);
    free(argv);
    free(lens);
    return r;
}

/* FCALL enqueue with the item's twelve. Caller frees. */
static redisReply *one(const queue_t *q, const item_t *it)
{
    const char *argv[ITEM_ARGS];
    size_t lens[ITEM_ARGS];
    item_argv(it, argv, lens);
    return fcall_bin("enqueue", q, -1, ITEM_ARGS, argv, lens);
}

/* r is {timer, reply...} with `want` replies; returns the timer. */
static long long expect_many(const redisReply *r, size_t want)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != want + 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        fail_msg("expected {timer, %zu replies}, got %s", want, reply_desc(r));
    return r->element[0]->integer;
}

static const char *code_of(const redisReply *item)
{
    if (item->type != REDIS_REPLY_ARRAY || item->elements < 1 ||
        item->element[0]->type != REDIS_REPLY_STRING)
        fail_msg("an item's reply: %s", reply_desc(item));
    return item->element[0]->str;
}

static long long seq_of(const queue_t *q)
{
    redisReply *r = rcmd("GET", qkey(q, "seq"), END);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Two queues compared key by key                                           */
/* ------------------------------------------------------------------------ */

/* Every key of q, sorted, as suffixes after its base (":3:ready", ...). */
static size_t queue_suffixes(const queue_t *q, char out[][96], size_t max)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "%s*", q->base);
    size_t n = 0, base_len = strlen(q->base);
    char cursor[32] = "0";
    do {
        redisReply *r = rcmd("SCAN", cursor, "MATCH", pattern, "COUNT", "1000", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            assert_true(n < max);
            snprintf(out[n++], 96, "%s", r->element[1]->element[i]->str + base_len);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    qsort(out, n, 96, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* The reply to cmd on key, as text (elements joined; scores kept only when
 * with_scores). */
static void key_text(const char *type, const char *key, bool with_scores, char *out, size_t cap)
{
    redisReply *r;
    if (strcmp(type, "list") == 0) r = rcmd("LRANGE", key, "0", "-1", END);
    else if (strcmp(type, "zset") == 0) r = with_scores ? rcmd("ZRANGE", key, "0", "-1", "WITHSCORES", END)
                                                        : rcmd("ZRANGE", key, "0", "-1", END);
    else if (strcmp(type, "set") == 0) r = rcmd("SORT", key, "ALPHA", END);
    else if (strcmp(type, "hash") == 0) r = rcmd("HGETALL", key, END);
    else r = rcmd("GET", key, END);
    size_t len = 0;
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) {
        snprintf(out, cap, "%s", r->str);
    } else if (r->type == REDIS_REPLY_ARRAY) {
        /* A hash's pairs sorted by field, so the order of fields made does not matter. */
        char pairs[64][160];
        size_t np = 0;
        size_t step = strcmp(type, "hash") == 0 ? 2 : 1;
        for (size_t i = 0; i + step - 1 < r->elements && np < 64; i += step)
            snprintf(pairs[np++], 160, "%s%s%s", r->element[i]->str, step == 2 ? "=" : "",
                     step == 2 ? r->element[i + 1]->str : "");
        /* Members scored by time are compared as a set: their order follows
         * the clock of each call. */
        if (step == 2 || (strcmp(type, "zset") == 0 && !with_scores))
            qsort(pairs, np, 160, (int (*)(const void *, const void *))strcmp);
        for (size_t i = 0; i < np; i++)
            len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s,", pairs[i]);
    }
    freeReplyObject(r);
}

/* A message's fields with its times as offsets from created_at. */
static void message_text(const queue_t *q, long long id, char *out, size_t cap)
{
    msg_t m;
    expect_ok_msg(fcall("get", q, id, END), &m);
    long long created = msg_int(&m, "created_at");
    size_t len = 0;
    for (int i = 0; i < m.nfields; i++) {
        const field_t *f = &m.f[i];
        if (strcmp(f->name, "created_at") == 0 || strcmp(f->name, "updated_at") == 0) continue;
        if (strcmp(f->name, "retry_after") == 0 || strcmp(f->name, "expires_at") == 0)
            len += (size_t)snprintf(out + len, cap - len, "%s=+%lld;", f->name,
                                    atoll(f->value) - created);
        else
            len += (size_t)snprintf(out + len, cap - len, "%s=%s;", f->name, f->value);
    }
}

/* The keys whose scores or contents are times: compared by members only,
 * or (the timer promise, the series) not at all. */
static bool time_scored(const char *suffix)
{
    return strcmp(suffix, ":3:scheduled") == 0 || strcmp(suffix, ":3:expiring") == 0;
}

/* a and b hold the same: the same keys, the same records (times as
 * offsets), the same indexes and counters. */
static void assert_same_queue(const queue_t *a, const queue_t *b)
{
    static char ka[128][96], kb[128][96];
    size_t na = queue_suffixes(a, ka, 128), nb = queue_suffixes(b, kb, 128);
    if (na != nb) fail_msg("%zu keys beside %zu", na, nb);
    for (size_t i = 0; i < na; i++) {
        if (strcmp(ka[i], kb[i]) != 0) fail_msg("key %s beside %s", ka[i], kb[i]);
        /* Times only: the timer promise, the time series, the policy's stamps. */
        if (strcmp(ka[i], ":timer") == 0 || strcmp(ka[i], ":series") == 0 ||
            strcmp(ka[i], ":policy") == 0)
            continue;
        char keya[256], keyb[256];   /* a base (127) and a suffix (95) */
        snprintf(keya, sizeof keya, "%.127s%.95s", a->base, ka[i]);
        snprintf(keyb, sizeof keyb, "%.127s%.95s", b->base, kb[i]);
        char ta[16], tb[16];
        snprintf(ta, sizeof ta, "%s", key_type(keya));
        snprintf(tb, sizeof tb, "%s", key_type(keyb));
        if (strcmp(ta, tb) != 0) fail_msg("%s is a %s beside a %s", ka[i], ta, tb);
        static char va[8192], vb[8192];
        if (strncmp(ka[i], ":m:", 3) == 0) {
            long long id = atoll(ka[i] + 3);
            message_text(a, id, va, sizeof va);
            message_text(b, id, vb, sizeof vb);
        } else {
            key_text(ta, keya, !time_scored(ka[i]), va, sizeof va);
            key_text(tb, keyb, !time_scored(kb[i]), vb, sizeof vb);
        }
        if (strcmp(va, vb) != 0) fail_msg("%s: \"%.300s\" beside \"%.300s\"", ka[i], va, vb);
    }
}

/* An item's reply with its times as offsets from its now (element 2), the
 * timer as whether there is one, a duplicate's message as message_text. */
static void reply_text(const redisReply *r, char *out, size_t cap)
{
    const char *code = code_of(r);
    size_t len = (size_t)snprintf(out, cap, "%s", code);
    if (strcmp(code, "ok") == 0) {
        long long now = r->element[2]->integer;
        len += (size_t)snprintf(out + len, cap - len, " id=%lld timer=%s mr=%lld",
                                r->element[1]->integer, r->element[3]->integer >= 0 ? "yes" : "no",
                                r->element[4]->integer);
        for (size_t i = 5; i < r->elements; i++)
            len += (size_t)snprintf(out + len, cap - len, " %+lld",
                                    r->element[i]->integer < 0 ? -1 : r->element[i]->integer - now);
    } else if (strcmp(code, "duplicate") == 0) {
        msg_t m;
        msg_parse(r->element[1], &m);
        len += (size_t)snprintf(out + len, cap - len, " id=%lld", m.id);
    } else {
        for (size_t i = 1; i < r->elements; i++)
            len += (size_t)snprintf(out + len, cap - len, " %s", r->element[i]->type == REDIS_REPLY_INTEGER
                                    ? num(r->element[i]->integer) : r->element[i]->str);
    }
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* The same items as N enqueues into one queue and one enqueue_many into
 * another: the same replies, records, indexes and counters. The items mix
 * every kind: plain, priority, group (with priority), delay, ttl, the
 * policy's defaults, attributes and flags (width 12 only), a key seen
 * earlier and a key repeated within the call, too_large, and a group's
 * delayed message. */
static void many_equals_n_enqueues(size_t width)
{
    queue_t a, b;
    queue_init(&a, "eq-one");
    queue_init(&b, "eq-many");
    /* The same policy and one earlier keyed message in both. */
    const queue_t *both[] = { &a, &b };
    for (size_t i = 0; i < 2; i++) {
        policy_set(both[i], "replace", "max_retries", "7", "message_ttl", "3600",
                   "max_payload_bytes", "2048");
        item_t early = { .payload = "early", .idem = "seen-before" };
        redisReply *r = one(both[i], &early);
        assert_string_equal(code_of(r), "ok");
        freeReplyObject(r);
    }
    static char big[3000];
    memset(big, 'z', sizeof big);
    const item_t every[] = {
        { .payload = "plain" },
        { .payload = "given retries", .max_retries = "2", .origin = "request" },
        { .payload = "urgent", .priority = "7" },
        { .payload = "in a group", .group = "g-a" },
        { .payload = "group and priority", .group = "g-a", .priority = "3" },
        { .payload = "later", .delay_ms = "60000" },
        { .payload = "group later", .group = "g-b", .delay_ms = "30000" },
        { .payload = "short life", .ttl_ms = "5000" },
        { .payload = "keyed", .idem = "k-1" },
        { .payload = "keyed again", .idem = "k-1" },
        { .payload = "seen before", .idem = "seen-before" },
        { .payload = big, .payload_len = sizeof big },
        { .payload = "attributed", .attributes = "\x01\x02attrs", .window = "60000", .flags = "ef" },
        { .payload = "no hints", .hint = "0", .delay_ms = "1000" },
        { .payload = "last", .priority = "1", .group = "g-c", .ttl_ms = "90000" },
    };
    /* Width 9 (many() sends it when no item gives attributes, a window or
     * flags): without the item that gives them. */
    item_t items[32];
    size_t n = 0;
    for (size_t i = 0; i < sizeof every / sizeof every[0]; i++)
        if (width == 12 || !every[i].flags) items[n++] = every[i];
    static char ra[32][512], rb[32][512];
    for (size_t i = 0; i < n; i++) {
        redisReply *r = one(&a, &items[i]);
        reply_text(r, ra[i], sizeof ra[i]);
        freeReplyObject(r);
    }
    redisReply *r = many(&b, n, items);
    long long timer = expect_many(r, n);
    for (size_t i = 0; i < n; i++) reply_text(r->element[i + 1], rb[i], sizeof rb[i]);
    /* The same clock for every item. */
    long long now = r->element[1]->element[2]->integer;
    for (size_t i = 0; i < n; i++)
        if (strcmp(code_of(r->element[i + 1]), "ok") == 0)
            assert_int_equal(r->element[i + 1]->element[2]->integer, now);
    freeReplyObject(r);
    for (size_t i = 0; i < n; i++)
        if (strcmp(ra[i], rb[i]) != 0) fail_msg("item %zu: \"%s\" beside \"%s\"", i, ra[i], rb[i]);
    assert_true(strncmp(rb[9], "duplicate", 9) == 0 && strncmp(rb[10], "duplicate", 9) == 0);
    assert_true(strncmp(rb[11], "too_large", 9) == 0);
    /* The call's timer: the earliest of its items' (the 5 s expiry). */
    assert_true(timer > 0 && timer <= 5000);
    assert_same_queue(&a, &b);
    assert_int_equal(counter(&b, "enqueued"), counter(&a, "enqueued"));
}

static void test_many_equals_n_enqueues(void **state)
{
    (void)state;
    many_equals_n_enqueues(12);
    many_equals_n_enqueues(9);
}

/* A key repeated within one call: the later item answers the first one's
 * message, as the second of two enqueues in a row; a key of an earlier call
 * answers that call's message. */
static void test_duplicates_within_and_across_calls(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "dups");
    const item_t first[] = {
        { .payload = "one", .idem = "x" },
        { .payload = "two", .idem = "x" },
        { .payload = "three", .idem = "y" },
        { .payload = "four", .idem = "x" },
    };
    redisReply *r = many(&q, 4, first);
    expect_many(r, 4);
    assert_string_equal(code_of(r->element[1]), "ok");
    long long x = r->element[1]->element[1]->integer;
    msg_t m;
    assert_string_equal(code_of(r->element[2]), "duplicate");
    msg_parse(r->element[2]->element[1], &m);
    assert_int_equal(m.id, x);
    assert_string_equal(msg_str(&m, "payload"), "one");
    assert_string_equal(code_of(r->element[3]), "ok");
    long long y = r->element[3]->element[1]->integer;
    assert_string_equal(code_of(r->element[4]), "duplicate");
    msg_parse(r->element[4]->element[1], &m);
    assert_int_equal(m.id, x);
    freeReplyObject(r);
    assert_int_equal(seq_of(&q), 2);
    assert_int_equal(counter(&q, "enqueued"), 2);
    assert_int_equal(llen(qkey(&q, "3:ready")), 2);

    const item_t again[] = { { .payload = "y again", .idem = "y" }, { .payload = "new", .idem = "z" } };
    r = many(&q, 2, again);
    expect_many(r, 2);
    assert_string_equal(code_of(r->element[1]), "duplicate");
    msg_parse(r->element[1]->element[1], &m);
    assert_int_equal(m.id, y);
    assert_string_equal(msg_str(&m, "payload"), "three");
    assert_string_equal(code_of(r->element[2]), "ok");
    assert_int_equal(r->element[2]->element[1]->integer, 3);
    freeReplyObject(r);
    assert_int_equal(counter(&q, "enqueued"), 3);
}

/* Items with their own outcomes among good ones, each answered as its own
 * enqueue would be, in order: too_large past the policy's limit,
 * not_found (flag e) until an earlier item of the call made the queue,
 * invalid_state for flag c without content_based_dedup. */
static void test_outcomes_mixed(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "mixed");
    static char big[1500];
    memset(big, 'b', sizeof big);
    const item_t items[] = {
        { .payload = "needs the queue", .attributes = "", .flags = "e" },
        { .payload = "makes it" },
        { .payload = "now it exists", .attributes = "", .flags = "e" },
        { .payload = "digest", .idem = "abc", .attributes = "", .flags = "c" },
        { .payload = big, .payload_len = sizeof big },
        { .payload = "after" },
    };
    redisReply *r = many(&q, 6, items);
    expect_many(r, 6);
    assert_string_equal(code_of(r->element[1]), "not_found");
    assert_int_equal(r->element[1]->elements, 1);
    assert_string_equal(code_of(r->element[2]), "ok");
    assert_int_equal(r->element[2]->element[1]->integer, 1);
    assert_string_equal(code_of(r->element[3]), "ok");
    assert_int_equal(r->element[3]->element[1]->integer, 2);
    assert_string_equal(code_of(r->element[4]), "invalid_state");
    assert_string_equal(r->element[4]->element[1]->str, "no_content_dedup");
    /* No policy limit: the big one goes in. */
    assert_string_equal(code_of(r->element[5]), "ok");
    assert_string_equal(code_of(r->element[6]), "ok");
    assert_int_equal(r->element[6]->element[1]->integer, 4);
    freeReplyObject(r);

    policy_set(&q, "replace", "max_payload_bytes", "1024");
    r = many(&q, 2, items + 4);
    expect_many(r, 2);
    assert_string_equal(code_of(r->element[1]), "too_large");
    assert_int_equal(r->element[1]->element[1]->integer, 1024);
    assert_string_equal(code_of(r->element[2]), "ok");
    assert_int_equal(r->element[2]->element[1]->integer, 5);
    freeReplyObject(r);
    assert_int_equal(counter(&q, "enqueued"), 5);
    assert_false(exists(qkey(&q, "idem:abc")));
}

/* Calls past the bounds, or with a bad item anywhere, are refused with an
 * error reply naming it, and nothing is written (no id, no counter, no
 * index, no key). */
static void test_bounds_refused_nothing_written(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "bounds");
    item_t items[MANY_MAX + 1];
    for (size_t i = 0; i <= MANY_MAX; i++) items[i] = (item_t){ .payload = "p" };

    redisReply *r = many(&q, MANY_MAX + 1, items);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "enqueue_many takes n (1-100), a width (9 or 12)"));
    freeReplyObject(r);
    expect_error(fcall("enqueue_many", &q, -1, "0", "9", END));
    expect_error(fcall("enqueue_many", &q, -1, "x", "9", END));
    /* n says 2, one item given; one field too many; a width of neither 9 nor 12. */
    expect_error(fcall("enqueue_many", &q, -1, "2", "12", "p", "3", "", "", "1", "default", "", "",
                       "", "", "", "", END));
    expect_error(fcall("enqueue_many", &q, -1, "1", "9", "p", "3", "", "", "1", "default", "", "",
                       "", "extra", END));
    expect_error(fcall("enqueue_many", &q, -1, "1", "10", "p", "3", "", "", "1", "default", "", "",
                       "", "", END));
    expect_error(fcall("enqueue_many", &q, -1, "1", "", "p", "3", "", "", "1", "default", "", "",
                       "", END));
    /* A bad argument in item 3 of 4: items 1 and 2 are not made either. */
    item_t bad[4] = { { .payload = "a" }, { .payload = "b" }, { .payload = "c", .priority = "12" },
                      { .payload = "d" } };
    r = many(&q, 4, bad);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "bad argument priority (item 3)"));
    freeReplyObject(r);
    bad[2] = (item_t){ .payload = "c", .flags = "ex", .attributes = "" };
    r = many(&q, 4, bad);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "bad argument flags (item 3)"));
    freeReplyObject(r);
    /* More than 1 MiB of payloads in two items, or of payloads and
     * attributes; one item alone may be larger. */
    size_t four = 1024 * 1024;
    char *big = malloc(four + 1);
    memset(big, 'q', four + 1);
    item_t two[2] = { { .payload = big, .payload_len = four / 2 + 1 },
                      { .payload = big, .payload_len = four / 2 } };
    r = many(&q, 2, two);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "at most 1048576 bytes"));
    freeReplyObject(r);
    char *attrs = malloc(262144 + 1);
    memset(attrs, 'a', 262144);
    attrs[262144] = '\0';
    two[0].payload_len = four - 262144;
    two[1] = (item_t){ .payload = "s", .attributes = attrs };
    r = many(&q, 2, two);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "at most 1048576 bytes"));
    freeReplyObject(r);

    static char keys[128][96];
    assert_int_equal(queue_suffixes(&q, keys, 128), 0);

    two[0].payload_len = four + 1;
    r = many(&q, 1, two);
    expect_many(r, 1);
    assert_string_equal(code_of(r->element[1]), "ok");
    freeReplyObject(r);
    /* Exactly at the bound: taken. */
    two[0].payload_len = four - 262144 - 1;
    r = many(&q, 2, two);
    expect_many(r, 2);
    freeReplyObject(r);
    free(big);
    free(attrs);
}

/* One PUBLISH per call, when any item is ready now; none when every item
 * is delayed or a duplicate. */
static void test_one_wake_per_call(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "wake");
    item_t items[10];
    for (size_t i = 0; i < 10; i++) items[i] = (item_t){ .payload = "ready", .group = i % 2 ? "g" : NULL };
    long long before = command_calls("publish");
    redisReply *r = many(&q, 10, items);
    expect_many(r, 10);
    freeReplyObject(r);
    assert_int_equal(command_calls("publish") - before, 1);
    for (size_t i = 0; i < 10; i++) items[i] = (item_t){ .payload = "later", .delay_ms = "60000" };
    before = command_calls("publish");
    r = many(&q, 10, items);
    expect_many(r, 10);
    freeReplyObject(r);
    assert_int_equal(command_calls("publish") - before, 0);
    assert_int_equal(llen(qkey(&q, "3:ready")), 5);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 10);
}

/* The originals that duplicates answer share the reply's bytes (4 MiB, as
 * a batch claim's messages): the call stops before the item whose original
 * would pass them, and nothing is done for it or the items after; the next
 * call takes them. */
static void test_duplicate_replies_bounded(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "budget");
    size_t big_len = 1536 * 1024;
    char *big = malloc(big_len);
    memset(big, 'o', big_len);
    const char *keys[] = { "o1", "o2", "o3" };
    for (size_t i = 0; i < 3; i++) {
        item_t original = { .payload = big, .payload_len = big_len, .idem = keys[i] };
        redisReply *r = one(&q, &original);
        assert_string_equal(code_of(r), "ok");
        freeReplyObject(r);
    }
    item_t repeats[4] = { { .payload = "r1", .idem = "o1" }, { .payload = "r2", .idem = "o2" },
                          { .payload = "r3", .idem = "o3" }, { .payload = "fresh" } };
    redisReply *r = many(&q, 4, repeats);
    expect_many(r, 2);
    for (size_t i = 1; i <= 2; i++) {
        assert_string_equal(code_of(r->element[i]), "duplicate");
        const redisReply *m = r->element[i]->element[1];
        bool found = false;
        for (size_t j = 0; j + 1 < m->elements; j += 2)
            if (strcmp(m->element[j]->str, "payload") == 0) found = m->element[j + 1]->len == big_len;
        assert_true(found);
    }
    freeReplyObject(r);
    assert_int_equal(seq_of(&q), 3);   /* "fresh" was not made */
    r = many(&q, 2, repeats + 2);
    expect_many(r, 2);
    assert_string_equal(code_of(r->element[1]), "duplicate");
    assert_string_equal(code_of(r->element[2]), "ok");
    assert_int_equal(r->element[2]->element[1]->integer, 4);
    freeReplyObject(r);
    free(big);
}

/* retryd_v8 (the previous release, tests/fixtures/retryd_v8.lua) loaded
 * beside this library: what either enqueues the other claims, on a 1-shard
 * queue (docs/operators.md "From retryd_v8 to retryd_v9"). */
static void test_previous_library_beside(void **state)
{
    (void)state;
    load_v8();
    queue_t q;
    queue_init(&q, "v8beside");
    redisReply *r = fcall_lib("retryd_v8_", "enqueue", &q, -1, 3,
                              (const char *[]){ "from v8", "3", "0" }, NULL);
    assert_string_equal(code_of(r), "ok");
    freeReplyObject(r);
    const item_t items[] = { { .payload = "from v9 one" }, { .payload = "from v9 two" } };
    r = many(&q, 2, items);
    expect_many(r, 2);
    freeReplyObject(r);
    msg_t m;
    r = fcall_lib("retryd_v8_", "claim", &q, -1, 2, (const char *[]){ "30000", "2" }, NULL);
    assert_true(has_code(r, "ok") && r->elements == 3);
    msg_parse(r->element[1], &m);
    assert_string_equal(msg_str(&m, "payload"), "from v8");
    msg_parse(r->element[2], &m);
    assert_string_equal(msg_str(&m, "payload"), "from v9 one");
    freeReplyObject(r);
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "from v9 two");
    freeReplyObject(rcmd("FUNCTION", "DELETE", "retryd_v8", END));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_equals_n_enqueues),
        cmocka_unit_test(test_duplicates_within_and_across_calls),
        cmocka_unit_test(test_outcomes_mixed),
        cmocka_unit_test(test_bounds_refused_nothing_written),
        cmocka_unit_test(test_one_wake_per_call),
        cmocka_unit_test(test_duplicate_replies_bounded),
        cmocka_unit_test(test_previous_library_beside),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
