/* store.c - queue operations as FCALLs of the retryd library, and their replies. */
#include "retryd/store.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/backend.h"
#include "retryd/buf.h"
#include "retryd/hash.h"
#include "retryd/keys.h"
#include "retryd/limits.h"
#include "retryd/log.h"
#include "retryd/shards.h"
#include "retryd/store_replies.h"
#include "retryd/utf8.h"

#include "store_internal.h"

/* ---------------------------------------------------------------- the table of operations */

/* A callback of any operation as an op keeps it: the row's deliver casts it
 * back to the operation's own type (rd_store_<result>_cb). */
typedef void (*any_cb_t)(void);

/* What a row's command is. */
enum {
    F_RO = 1,           /* FCALL_RO or a plain read: it cannot write, so a lost answer
                           is UNAVAILABLE (not done), never LOST */
    F_NO_OUTCOME = 2,   /* writes nothing a caller could be unsure of (series' sample):
                           a lost answer is UNAVAILABLE too */
    F_REGISTRY = 4,     /* KEYS[1] is the registry (its slot), not a queue's base */
    F_COMMAND = 8,      /* a Redis command (the row's name), not a library function */
    F_HINTED = 16,      /* the reply may carry a timer hint for q, and a write nudges
                           q's series (registry.c) */
};

/* One row per library function (and per plain command the store sends),
 * the way redis's command table has one per command: the function's name,
 * what kind of call it is, its typed result and the parser that fills it,
 * what frees it, and the thunk that hands it to the operation's callback.
 * The argv builder is the operation's rd_store_<name> below: it starts with
 * begin_op(c, st, OP_<NAME>, ...) and ends with send_op(); docs/design.md "How to
 * add a library function". */
typedef struct op_def {
    const char *name;
    unsigned flags;
    size_t result_size;         /* the result type's, at most RESULT_BYTES */
    /* Fills res (zeroed) from a reply that is not an error reply; kept is
     * what the builder kept for it (NULL: nothing), *hint the call's timer
     * hint (-1 none). False: a reply of another shape (RD_STORE_ERROR). A
     * parser may set res's head (an outcome other than OK). */
    bool (*parse)(const rd_reply_t *reply, const void *kept, void *res, long long *hint);
    void (*free)(void *res);    /* what parse allocated (NULL: nothing) */
    void (*deliver)(any_cb_t cb, const void *res, void *arg);
} op_def_t;

typedef enum op_id {
    OP_ENQUEUE, OP_ENQUEUE_MANY, OP_CLAIM, OP_SETTLE_CLAIM, OP_SUCCEED, OP_SUCCEED_MANY, OP_FAIL, OP_SNOOZE,
    OP_EXTEND,
    OP_RELEASE, OP_RELEASE_LOST, OP_REPLAY, OP_REPLAY_MANY, OP_KILL, OP_DELETE, OP_GET,
    OP_LIST, OP_STATS, OP_GROUPS, OP_SERIES, OP_TICK, OP_POLICY_GET, OP_POLICY_SET, OP_PAUSE,
    OP_ALERTS_TAKE, OP_ALERTS_ACK, OP_ALERTS_TOUCH,
    OP_REDRIVE_TAKE, OP_REDRIVE_IN, OP_REDRIVE_DONE, OP_REDRIVE_FORGET,
    OP_REGISTER, OP_TIMER_TAKE, OP_TIMER_DONE, OP_QUEUES_PAGE, OP_DLQ_LINK,
    OP_DROP_QUEUE, OP_PURGE_ALL, OP_QUEUE_FORGET, OP_DLQ_SOURCES, OP_TAGS_SET, OP_TAGS_REMOVE,
    OP_TAGS_GET, OP_MOVE_START, OP_MOVE_CLAIM, OP_MOVE_REPORT, OP_MOVE_CANCEL, OP_MOVE_LIST,
    OP_MOVE_WATCH, OP_MOVE_DUE,
    OP_SHARDS_SET, OP_POLICY_COPY, OP_SHARD_RETIRE, OP_SHARD_SCAN, OP_POLICY_PAIRS, OP_LIBRARIES,
    OP_PING, OP_CONFIG_GET,
    OP_COUNT
} op_id_t;

static const op_def_t ops[OP_COUNT];

typedef struct op {
    const op_def_t *def;
    bool read_only;             /* F_RO or F_NO_OUTCOME */
    any_cb_t cb;
    void *arg;
    void *kept;                 /* owned: what the builder kept for the parser */
    void (*kept_free)(void *kept);
    rd_store_t *st;
    char *queue;                /* owned: where a timer hint goes (F_HINTED rows) */
    size_t queue_len;
    int shard;                  /* the queue's shard the call went to */
    bool nudge;                 /* a write to queue: it may nudge its series (w.changed) */
    char what[48];              /* the function (or command) called, for the log */
    char nonce[NONCE_MAX];      /* a claim's nonce ("" for none): lost answer -> claim_lost */
    rd_reply_t *held;           /* owned: the reply, while the write hook's registration
                                   is applied (resume_held) */
    bool in_hook;               /* inside the written hook: a resume now is noted... */
    bool resumed_in_hook;       /* ...here, and the callback runs when the hook returns */
} op_t;

/* ---------------------------------------------------------------- the table */

/* deliver_<cb>: hands a result to a callback of type rd_store_<cb>_cb. */
#define DELIVER(result_type, cb_type)                                              \
    static void deliver_##cb_type(any_cb_t cb, const void *res, void *arg)       \
    {                                                                            \
        ((cb_type)cb)((const result_type *)res, arg);                            \
    }
DELIVER(rd_store_head_t, rd_store_status_cb)
DELIVER(rd_store_messages_t, rd_store_messages_cb)
DELIVER(rd_store_enqueued_many_t, rd_store_enqueued_many_cb)
DELIVER(rd_store_list_t, rd_store_list_cb)
DELIVER(rd_store_outcomes_t, rd_store_outcomes_cb)
DELIVER(rd_store_settled_t, rd_store_settled_cb)
DELIVER(rd_store_released_t, rd_store_released_cb)
DELIVER(rd_store_replayed_t, rd_store_replayed_cb)
DELIVER(rd_store_stats_result_t, rd_store_stats_cb)
DELIVER(rd_store_tick_t, rd_store_tick_cb)
DELIVER(rd_store_series_t, rd_store_series_cb)
DELIVER(rd_store_page_t, rd_store_page_cb)
DELIVER(rd_store_taken_t, rd_store_taken_cb)
DELIVER(rd_store_done_t, rd_store_done_cb)
DELIVER(rd_store_policy_t, rd_store_policy_cb)
DELIVER(rd_store_count_t, rd_store_count_cb)
DELIVER(rd_store_strings_t, rd_store_strings_cb)
DELIVER(rd_store_alerts_taken_t, rd_store_alerts_taken_cb)
DELIVER(rd_store_redrive_taken_t, rd_store_redrive_taken_cb)
DELIVER(rd_store_ids_t, rd_store_ids_cb)
DELIVER(rd_store_groups_t, rd_store_groups_cb)
DELIVER(rd_store_cleared_t, rd_store_cleared_cb)
#undef DELIVER

/* Every result fits the buffer on_reply parses into. */
enum { RESULT_BYTES = 512 };
#define FITS(type) (sizeof(type) + 0 * sizeof(char[sizeof(type) <= RESULT_BYTES ? 1 : -1]))

/* ROW(id, name, flags, result type, parse, free, callback type) */
#define ROW(id, name, flags, type, parse, free, cb_type) \
    [id] = { name, flags, FITS(type), parse, free, deliver_##cb_type }

static const op_def_t ops[OP_COUNT] = {
    ROW(OP_ENQUEUE, "enqueue", F_HINTED, rd_store_messages_t,
        rd_store_parse_enqueue, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_ENQUEUE_MANY, "enqueue_many", F_HINTED, rd_store_enqueued_many_t,
        rd_store_parse_enqueue_many, rd_result_free_enqueued_many, rd_store_enqueued_many_cb),
    ROW(OP_CLAIM, "claim", F_HINTED, rd_store_messages_t,
        rd_store_parse_claim, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_SETTLE_CLAIM, "settle_claim", F_HINTED, rd_store_settled_t,
        rd_store_parse_settle_claim, rd_result_free_settled, rd_store_settled_cb),
    ROW(OP_SUCCEED, "succeed", F_HINTED, rd_store_messages_t,
        rd_store_parse_hinted, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_SUCCEED_MANY, "succeed_many", F_HINTED, rd_store_outcomes_t,
        rd_store_parse_succeed_many, rd_result_free_outcomes, rd_store_outcomes_cb),
    ROW(OP_FAIL, "fail", F_HINTED, rd_store_messages_t,
        rd_store_parse_hinted, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_SNOOZE, "snooze", F_HINTED, rd_store_messages_t,
        rd_store_parse_hinted, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_EXTEND, "extend", F_HINTED, rd_store_messages_t,
        rd_store_parse_hinted, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_RELEASE, "release", 0, rd_store_released_t,
        rd_store_parse_released, NULL, rd_store_released_cb),
    ROW(OP_RELEASE_LOST, "release_lost", 0, rd_store_released_t,
        rd_store_parse_released, NULL, rd_store_released_cb),
    /* replay and replay_many are hinted for the series' nudge; their replies
     * carry no timer hint. */
    ROW(OP_REPLAY, "replay", F_HINTED, rd_store_messages_t,
        rd_store_parse_message, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_REPLAY_MANY, "replay_many", F_HINTED, rd_store_replayed_t,
        rd_store_parse_replayed, NULL, rd_store_replayed_cb),
    ROW(OP_KILL, "kill", F_HINTED, rd_store_messages_t,
        rd_store_parse_hinted, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_DELETE, "delete", 0, rd_store_head_t,
        rd_store_parse_outcome, NULL, rd_store_status_cb),
    ROW(OP_GET, "get", F_RO, rd_store_messages_t,
        rd_store_parse_message, rd_result_free_messages, rd_store_messages_cb),
    ROW(OP_LIST, "list", F_RO, rd_store_list_t,
        rd_store_parse_list, rd_result_free_list, rd_store_list_cb),
    ROW(OP_STATS, "stats", F_RO, rd_store_stats_result_t,
        rd_store_parse_stats, rd_result_free_stats, rd_store_stats_cb),
    ROW(OP_GROUPS, "groups", F_RO, rd_store_groups_t,
        rd_store_parse_groups, rd_result_free_groups, rd_store_groups_cb),
    ROW(OP_SERIES, "series", F_NO_OUTCOME, rd_store_series_t,
        rd_store_parse_series, rd_result_free_series, rd_store_series_cb),
    ROW(OP_TICK, "tick", 0, rd_store_tick_t,
        rd_store_parse_tick, NULL, rd_store_tick_cb),
    ROW(OP_POLICY_GET, "policy_get", F_RO, rd_store_policy_t,
        rd_store_parse_policy, NULL, rd_store_policy_cb),
    ROW(OP_POLICY_SET, "policy_set", 0, rd_store_policy_t,
        rd_store_parse_policy, NULL, rd_store_policy_cb),
    ROW(OP_PAUSE, "pause", 0, rd_store_policy_t,
        rd_store_parse_paused, NULL, rd_store_policy_cb),
    ROW(OP_ALERTS_TAKE, "alerts_take", 0, rd_store_alerts_taken_t,
        rd_store_parse_alerts_take, rd_result_free_alerts_taken, rd_store_alerts_taken_cb),
    ROW(OP_ALERTS_ACK, "alerts_ack", 0, rd_store_count_t,
        rd_store_parse_count, NULL, rd_store_count_cb),
    ROW(OP_ALERTS_TOUCH, "alerts_touch", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_REDRIVE_TAKE, "redrive_take", 0, rd_store_redrive_taken_t,
        rd_store_parse_redrive_take, rd_result_free_redrive_taken, rd_store_redrive_taken_cb),
    ROW(OP_REDRIVE_IN, "redrive_in", 0, rd_store_ids_t,
        rd_store_parse_ids, rd_result_free_ids, rd_store_ids_cb),
    ROW(OP_REDRIVE_DONE, "redrive_done", 0, rd_store_count_t,
        rd_store_parse_count, NULL, rd_store_count_cb),
    ROW(OP_REDRIVE_FORGET, "redrive_forget", 0, rd_store_count_t,
        rd_store_parse_count, NULL, rd_store_count_cb),
    ROW(OP_REGISTER, "register", F_REGISTRY, rd_store_count_t,
        rd_store_parse_count, NULL, rd_store_count_cb),
    ROW(OP_TIMER_TAKE, "timer_take", F_REGISTRY, rd_store_taken_t,
        rd_store_parse_timer_take, rd_result_free_taken, rd_store_taken_cb),
    ROW(OP_TIMER_DONE, "timer_done", F_REGISTRY, rd_store_done_t,
        rd_store_parse_timer_done, NULL, rd_store_done_cb),
    ROW(OP_QUEUES_PAGE, "queues_page", F_REGISTRY | F_RO, rd_store_page_t,
        rd_store_parse_page, rd_result_free_page, rd_store_page_cb),
    ROW(OP_DLQ_LINK, "dlq_link", F_REGISTRY, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_DROP_QUEUE, "drop_queue", 0, rd_store_cleared_t,
        rd_store_parse_cleared, NULL, rd_store_cleared_cb),
    ROW(OP_PURGE_ALL, "purge_all", 0, rd_store_cleared_t,
        rd_store_parse_cleared, NULL, rd_store_cleared_cb),
    ROW(OP_QUEUE_FORGET, "queue_forget", F_REGISTRY, rd_store_count_t,
        rd_store_parse_count, NULL, rd_store_count_cb),
    ROW(OP_DLQ_SOURCES, "dlq_sources", F_REGISTRY | F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_TAGS_SET, "tags_set", 0, rd_store_count_t,
        rd_store_parse_tags, NULL, rd_store_count_cb),
    ROW(OP_TAGS_REMOVE, "tags_remove", 0, rd_store_count_t,
        rd_store_parse_tags, NULL, rd_store_count_cb),
    ROW(OP_TAGS_GET, "tags_get", F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    /* Message move tasks (store_moves.c): every reply as strings. */
    ROW(OP_MOVE_START, "move_start", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_CLAIM, "move_claim", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_REPORT, "move_report", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_CANCEL, "move_cancel", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_LIST, "move_list", F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_WATCH, "move_watch", F_REGISTRY, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_MOVE_DUE, "move_due", F_REGISTRY | F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    /* A sharded queue's layout (store_shards.c): every reply as strings. */
    ROW(OP_SHARDS_SET, "shards_set", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_POLICY_COPY, "policy_copy", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_SHARD_RETIRE, "shard_retire", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_SHARD_SCAN, "shard_scan", 0, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_POLICY_PAIRS, "policy_get", F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_LIBRARIES, "FUNCTION", F_COMMAND | F_RO, rd_store_strings_t,
        rd_store_parse_libraries, rd_result_free_strings, rd_store_strings_cb),
    ROW(OP_PING, "PING", F_COMMAND | F_RO, rd_store_head_t,
        rd_store_parse_pong, NULL, rd_store_status_cb),
    ROW(OP_CONFIG_GET, "CONFIG", F_COMMAND | F_RO, rd_store_strings_t,
        rd_store_parse_strings, rd_result_free_strings, rd_store_strings_cb),
};
#undef ROW
#undef FITS


/* ---------------------------------------------------------------- calls */

static void free_op(op_t *op)
{
    rd_reply_free(op->held);
    rd_free(op->queue);
    if (op->kept) op->kept_free(op->kept);
    rd_free(op);
}

/* Whether a claim or settle-and-claim that answered OK changed nothing: no
 * message leased and no settlement applied (each not_found, invalid_state or
 * lease_mismatch). The library wrote no key for it, so it must not nudge
 * the queue into the registry either: a claim on a name that never had a
 * message leaves no trace (README "Claim order"; docs/design.md "Claims that
 * find nothing"). */
static bool claimed_nothing(const op_def_t *def, const void *res)
{
    if (def == &ops[OP_CLAIM]) return ((const rd_store_messages_t *)res)->count == 0;
    const rd_store_settled_t *s = res;
    if (def != &ops[OP_SETTLE_CLAIM] || s->count > 0) return false;
    for (size_t i = 0; i < s->settled; i++) {
        const rd_str_t *o = &s->outcomes[i];
        bool applied = (o->len == 9 && memcmp(o->ptr, "succeeded", 9) == 0) ||
                       (o->len == 7 && memcmp(o->ptr, "pending", 7) == 0) ||
                       (o->len == 4 && memcmp(o->ptr, "dead", 4) == 0);
        if (applied) return false;
    }
    return true;
}

static void on_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg);

/* The write hook's registration has been applied (or has failed): the
 * callback gets the held reply, parsed again. */
static void resume_held(void *arg)
{
    op_t *op = arg;
    if (op->in_hook) {
        /* Answered before the hook returned (no backend does so today). */
        op->resumed_in_hook = true;
        return;
    }
    const rd_reply_t *held = op->held;
    op->st = NULL;  /* the hooks ran: on_reply only delivers */
    on_reply(held, RD_REDIS_OK, op);
}

/* The one completion path of every operation: the reply (or the lost link)
 * becomes the row's typed result, the timer hears of its hint, the callback
 * runs, and the result is freed. When the hook sends a registration that
 * must be applied before anyone hears of the write, the reply is held and
 * the callback runs once it has been (resume_held). */
static void on_reply(const rd_reply_t *reply, rd_redis_status_t status, void *arg)
{
    op_t *op = arg;
    const op_def_t *def = op->def;
    _Alignas(max_align_t) unsigned char res[RESULT_BYTES];
    rd_store_head_t *head = (rd_store_head_t *)res;
    memset(res, 0, def->result_size);
    long long hint = -1;
    bool hint_unknown = false;  /* the call may have written, its hint is not known */
    char detail[160];
    if (status == RD_REDIS_LOST) {
        hint_unknown = !op->read_only;
        /* A read has no outcome to be unsure of: it simply was not done. */
        head->status = op->read_only ? RD_STORE_UNAVAILABLE : RD_STORE_LOST;
    } else if (status == RD_REDIS_NOT_SENT) {
        head->status = RD_STORE_UNAVAILABLE;
    } else if (rd_reply_type(reply) == RD_REPLY_ERROR) {
        head->status = RD_STORE_ERROR;
        head->detail.ptr = rd_reply_str(reply, &head->detail.len);
    } else if (!def->parse(reply, op->kept, res, &hint)) {
        char got[64];
        rd_reply_describe(reply, got, sizeof got);
        if (def->free) def->free(res);
        memset(res, 0, def->result_size);
        head->status = RD_STORE_ERROR;
        snprintf(detail, sizeof detail, "unexpected reply to %s: %s", op->what, got);
        rd_error("store: %s (another version of the library?)", detail);
        head->detail.ptr = detail;
        head->detail.len = strlen(detail);
        hint = -1;
        hint_unknown = true;
    }
    /* The hint goes to the schedule (the write hooks) before anyone hears
     * of the new work. */
    rd_store_t *st = op->st;
    rd_store_queue_t q = { .name = op->queue, .len = op->queue_len, .shard = op->shard };
    if (st == NULL) {
        /* resume_held: the hooks heard of this reply already. */
    } else if (op->queue && st->written && head->status == RD_STORE_OK) {
        const rd_store_messages_t *m = (const rd_store_messages_t *)res;
        rd_store_written_t w = {
            .hint_ms = hint,
            .first = (def == &ops[OP_ENQUEUE] && m->count == 1 && m->messages[0].id == 1) ||
                     (def == &ops[OP_ENQUEUE_MANY] && ((const rd_store_enqueued_many_t *)res)->first),
            .changed = op->nudge && !claimed_nothing(def, res),
        };
        op->in_hook = true;
        bool hold = st->written(st->write_arg, q, &w, resume_held, op);
        op->in_hook = false;
        if (hold && !op->resumed_in_hook) {
            /* Nobody hears of the write before its registration is in:
             * else a DeleteQueue that follows the answer could run before
             * it, and the registration would bring the dropped queue back
             * (docs/design.md "Leaving the registry"). */
            if (def->free) def->free(res);
            op->held = rd_reply_copy(reply);
            return;
        }
    } else if (op->queue && st->written && hint_unknown) {
        rd_store_written_t w = { .hint_ms = -1, .unknown = true };
        (void)st->written(st->write_arg, q, &w, NULL, NULL);
    }
    /* A claim that may have leased messages for a client that will never
     * hear of them: hand them back once the link is back. */
    if (status == RD_REDIS_LOST && op->nonce[0] && op->queue && st && st->claim_lost)
        st->claim_lost(st->lost_arg, q, op->nonce);
    def->deliver(op->cb, res, op->arg);
    if (def->free) def->free(res);
    free_op(op);
}

/* FCALL name numkeys base (4), then at most RD_ACK_BATCH_MAX (id, token)
 * pairs, a mode and RD_STORE_REPLAY_IDS_MAX ids, or the longest call,
 * settle_claim's: lease, count and n (3), 6 per settlement, then dead_ttl,
 * succeeded_ttl, the lease's origin, worker and the claim's nonce (5). */
enum { MAX_ARGS = RD_STORE_ARGS_MAX };
_Static_assert(2 * RD_ACK_BATCH_MAX <= 6 * RD_SETTLE_BATCH_MAX &&
               RD_STORE_REPLAY_IDS_MAX <= 6 * RD_SETTLE_BATCH_MAX, "every call fits MAX_ARGS");
_Static_assert(5 + 3 * RD_STORE_REPORTS_MAX <= MAX_ARGS, "timer_done's reports fit a call");

/* One command being built: its row, its argv and what the row's parser
 * will need. */
typedef struct cmd {
    const op_def_t *def;
    rd_store_queue_t q;             /* the queue of a queue's function */
    int shard;                      /* the shard its base names */
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    char numbers[MAX_ARGS][24];     /* storage for formatted integers */
    char fn[48];                    /* the versioned function name */
    char nonce[NONCE_MAX];          /* a claim's nonce (arg_nonce), "" for none */
    rd_buf_t base, mkey;
    void *kept;                     /* for the parser (owned until send) */
    void (*kept_free)(void *kept);
} cmd_t;

static void arg_bytes(cmd_t *c, const char *s, size_t len)
{
    assert(c->argc < MAX_ARGS);
    c->argv[c->argc] = s;
    c->lens[c->argc] = len;
    c->argc++;
}

static void arg_str(cmd_t *c, const char *s)
{
    arg_bytes(c, s, strlen(s));
}

static void arg_int(cmd_t *c, long long v)
{
    int n = snprintf(c->numbers[c->argc], sizeof c->numbers[0], "%lld", v);
    arg_bytes(c, c->numbers[c->argc], (size_t)n);
}

/* A claim's nonce, "<instance>.<seq>": unique per call, so release_lost can
 * find what this call leased if its answer is lost. */
static void arg_nonce(cmd_t *c, rd_store_t *st)
{
    int n = snprintf(c->nonce, sizeof c->nonce, "%s.%llx", st->instance, ++st->nonce_seq);
    assert(n > 0 && (size_t)n < sizeof c->nonce);
    arg_bytes(c, c->nonce, (size_t)n);
}

static const rd_store_queue_t NO_QUEUE = { .name = NULL, .len = 0 };

/* The shard an operation on message id goes to: the id names it
 * (docs/sharding.md "Ids"). An id no shard hands out goes to shard 0, as
 * every id did before shards, and is not found there. */
static int shard_of_message(long long id)
{
    return rd_shards_id_valid(id) ? rd_shards_of_id(id) : 0;
}

/* Shard k's salt: the caller's view's, else this daemon's view of the
 * queue (a call by id, a release), else 0 (one Redis). */
static int salt_of(rd_store_t *st, rd_store_queue_t q, int shard)
{
    assert(shard >= 0 && shard < RD_SHARDS_MAX);
    if (shard == 0) return 0;
    if (q.salts == NULL) {
        rd_shard_view_t *v = rd_shard_views_find(st->views, q, uv_now(st->loop));
        if (v) q = rd_shard_view_at(v, q, shard);
    }
    return q.salts && shard <= q.nsalts ? q.salts[shard - 1] : 0;
}

/* Starts the command of row id: FCALL (FCALL_RO for a read) <library>_name
 * with KEYS[1] the base of the queue's shard (q.shard's, or for id > 0 the
 * id's, which adds the message key as KEYS[2]) or the registry; a plain command is its name. Every call goes through here,
 * so the library's version is added in one place. Not a memset: the
 * argument arrays are large and filled as they are used. */
static void begin_op(cmd_t *c, rd_store_t *st, op_id_t id, rd_store_queue_t q, long long msg_id)
{
    const op_def_t *def = &ops[id];
    c->def = def;
    c->q = q;
    c->shard = 0;
    c->argc = 0;
    c->nonce[0] = '\0';
    c->base = (rd_buf_t)RD_BUF_INIT;
    c->mkey = (rd_buf_t)RD_BUF_INIT;
    c->kept = NULL;
    c->kept_free = NULL;
    if (def->flags & F_COMMAND) {
        arg_str(c, def->name);
        return;
    }
    arg_str(c, def->flags & F_RO ? "FCALL_RO" : "FCALL");
    int n = snprintf(c->fn, sizeof c->fn, "%s%s", RD_FUNCTION(""), def->name);
    assert(n > 0 && (size_t)n < sizeof c->fn);
    arg_str(c, c->fn);
    if (def->flags & F_REGISTRY) {
        arg_str(c, "1");
        arg_bytes(c, st->registry_key.data, st->registry_key.len);
        return;
    }
    int shard = msg_id > 0 ? shard_of_message(msg_id) : q.shard;
    c->shard = shard;
    rd_keys_shard_base(&c->base, st->prefix, q.name, q.len, shard, salt_of(st, q, shard));
    arg_str(c, msg_id > 0 ? "2" : "1");
    arg_bytes(c, c->base.data, c->base.len);
    if (msg_id > 0) {
        rd_keys_message(&c->mkey, c->base.data, c->base.len, msg_id);
        arg_bytes(c, c->mkey.data, c->mkey.len);
    }
}

/* send_argv: sends c's row with argv[0..argc) (c's own, or longer ones);
 * cb is the operation's callback (its row's type), run exactly once from the
 * loop unless this returns -1. */
static int send_argv(rd_store_t *st, cmd_t *c, int argc, const char **argv, const size_t *lens,
                     any_cb_t cb, void *arg)
{
    const op_def_t *def = c->def;
    op_t *op = rd_malloc(sizeof *op);
    op->def = def;
    op->read_only = (def->flags & (F_RO | F_NO_OUTCOME)) != 0;
    op->cb = cb;
    op->arg = arg;
    op->kept = c->kept;
    op->kept_free = c->kept_free;
    op->st = st;
    op->held = NULL;
    op->in_hook = op->resumed_in_hook = false;
    bool hinted = (def->flags & F_HINTED) != 0;
    op->queue = hinted ? rd_strndup(c->q.name, c->q.len) : NULL;
    op->queue_len = hinted ? c->q.len : 0;
    op->shard = c->shard;
    op->nudge = hinted && !op->read_only;
    memcpy(op->nonce, c->nonce, sizeof op->nonce);
    snprintf(op->what, sizeof op->what, "%s", def->flags & F_COMMAND ? def->name : c->fn);
    int rc = rd_backend_command(st->redis, argc, argv, lens, on_reply, op);
    if (rc != 0) free_op(op);
    rd_buf_free(&c->base);
    rd_buf_free(&c->mkey);
    return rc;
}

static int send_op(rd_store_t *st, cmd_t *c, any_cb_t cb, void *arg)
{
    return send_argv(st, c, c->argc, c->argv, c->lens, cb, arg);
}

#define CB(cb) ((any_cb_t)(cb))

/* ---------------------------------------------------------------- the registry's calls */

int rd_store_register(rd_store_t *st, rd_store_queue_t q, long long in_ms, rd_store_count_cb cb,
                      void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_REGISTER, NO_QUEUE, 0);
    arg_bytes(&c, q.name, q.len);
    arg_int(&c, in_ms < 0 ? -1LL : in_ms);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_dlq_link(rd_store_t *st, rd_store_queue_t q, rd_store_queue_t target,
                      rd_store_strings_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_DLQ_LINK, NO_QUEUE, 0);
    arg_bytes(&c, q.name, q.len);
    arg_bytes(&c, target.name ? target.name : "", target.len);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_release_lost(rd_store_t *st, rd_store_queue_t q, size_t n,
                          const char *const *nonces, rd_store_released_cb cb, void *arg)
{
    if (n == 0 || n + 4 > MAX_ARGS) return -1;
    cmd_t c;
    begin_op(&c, st, OP_RELEASE_LOST, q, 0);
    for (size_t i = 0; i < n; i++) arg_str(&c, nonces[i]);
    return send_op(st, &c, CB(cb), arg);
}

/* A write that wants its queue registered first (store.h "hooks"); always:
 * whatever the hook remembers. */
static void before_write_as(rd_store_t *st, rd_store_queue_t q, bool always)
{
    if (st->before_write) st->before_write(st->write_arg, q, always);
}

/* ---------------------------------------------------------------- queue calls */

int rd_store_claim(rd_store_t *st, rd_store_queue_t q, rd_lease_t lease, int count,
                   const char *worker, rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_CLAIM, q, 0);
    arg_int(&c, lease.ms);
    arg_int(&c, count);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease.given ? "request" : "default");
    arg_str(&c, worker ? worker : "");
    arg_nonce(&c, st);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_succeed(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                     rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_SUCCEED, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, st->succeeded_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
}

/* A failure's error as sent: at most RD_LAST_ERROR_MAX bytes, cut before a
 * UTF-8 sequence as the library would cut it, so Redis never reads the rest
 * (a 1 MiB argument alone costs it about a millisecond). */
static void arg_error(cmd_t *c, const char *error)
{
    arg_bytes(c, error, rd_utf8_cut(error, strlen(error), RD_LAST_ERROR_MAX));
}

int rd_store_fail(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                  const char *error, bool retryable, long long retry_after_ms,
                  rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_FAIL, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_error(&c, error);
    arg_str(&c, retryable ? "1" : "0");
    arg_int(&c, retry_after_ms < 0 ? -1 : retry_after_ms);
    arg_int(&c, st->dead_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_snooze(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    long long delay_ms, rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_SNOOZE, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, delay_ms);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_extend(rd_store_t *st, rd_store_queue_t q, long long id, const char *token,
                    rd_lease_t lease, rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_EXTEND, q, id);
    arg_int(&c, id);
    arg_str(&c, token ? token : "");
    arg_int(&c, lease.ms);
    arg_str(&c, "1");   /* this caller forwards timer hints */
    arg_str(&c, lease.given ? "request" : "default");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_replay(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb,
                    void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_REPLAY, q, id);
    arg_int(&c, id);
    /* Hinted for the series' nudge; replay's reply carries no timer hint. */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_get(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_GET, q, id);
    arg_int(&c, id);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_list(rd_store_t *st, rd_store_queue_t q, const char *status, int limit,
                  const char *cursor, const char *error_contains, long long since_ms,
                  long long until_ms, rd_store_list_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_LIST, q, 0);
    arg_str(&c, status ? status : "");
    arg_int(&c, limit);
    arg_str(&c, cursor ? cursor : "");
    arg_str(&c, error_contains ? error_contains : "");
    if (since_ms >= 0) arg_int(&c, since_ms);
    else arg_str(&c, "");
    if (until_ms >= 0) arg_int(&c, until_ms);
    else arg_str(&c, "");
    if (q.rev > 0) arg_int(&c, q.rev);   /* a sharded queue's page: the view's rev */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_succeed_many(rd_store_t *st, rd_store_queue_t q, size_t n, const long long *ids,
                          const char *const *tokens, rd_store_outcomes_cb cb, void *arg)
{
    if (n == 0 || n > RD_ACK_BATCH_MAX) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_SUCCEED_MANY, q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, ids[i]);
        arg_str(c, tokens[i] ? tokens[i] : "");
    }
    arg_int(c, st->succeeded_ttl_ms);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_settle_claim(rd_store_t *st, rd_store_queue_t q, rd_lease_t lease, int count,
                          const char *worker, size_t n, const rd_settlement_t *items, rd_store_settled_cb cb, void *arg)
{
    if (n > RD_SETTLE_BATCH_MAX || count < 0 || count > RD_CLAIM_COUNT_MAX) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_SETTLE_CLAIM, q, 0);
    arg_int(c, lease.ms);
    arg_int(c, count);
    arg_int(c, (long long)n);
    for (size_t i = 0; i < n; i++) {
        const rd_settlement_t *s = &items[i];
        arg_int(c, s->id);
        arg_str(c, s->lease_token ? s->lease_token : "");
        arg_str(c, s->failed ? "failed" : s->snoozed ? "snoozed" : "succeeded");
        arg_error(c, s->failed && s->error ? s->error : "");
        arg_str(c, s->retryable || !s->failed ? "1" : "0");
        /* A snooze's delay goes in the retry_after_ms slot. */
        if (s->snoozed) arg_int(c, s->delay_ms);
        else arg_int(c, s->failed && s->retry_after_ms >= 0 ? s->retry_after_ms : -1);
    }
    arg_int(c, st->dead_ttl_ms);        /* asks for the timer hint */
    arg_int(c, st->succeeded_ttl_ms);
    arg_str(c, lease.given ? "request" : "default");
    arg_str(c, worker ? worker : "");
    if (count > 0) arg_nonce(c, st);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_release(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs,
                     rd_store_released_cb cb, void *arg)
{
    if (n == 0 || n > RD_CLAIM_COUNT_MAX) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    /* What one claim leased: one shard's, the one its ids name. */
    q.shard = shard_of_message(msgs[0].id);
    begin_op(c, st, OP_RELEASE, q, 0);
    for (size_t i = 0; i < n; i++) {
        arg_int(c, msgs[i].id);
        arg_bytes(c, msgs[i].lease_token.ptr ? msgs[i].lease_token.ptr : "",
                  msgs[i].lease_token.len);
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

static void on_orphans_released(const rd_store_released_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK)
        rd_warn("store: handing back messages of a departed client failed; their leases "
                "will expire instead");
}

void rd_store_release_orphans(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_message_t *msgs)
{
    if (st->release_orphans) {  /* lost_claims.c: sent again until Redis answers */
        st->release_orphans(st->orphans_arg, q, n, msgs);
        return;
    }
    for (size_t from = 0; from < n; from += RD_CLAIM_COUNT_MAX) {
        size_t batch = n - from < RD_CLAIM_COUNT_MAX ? n - from : RD_CLAIM_COUNT_MAX;
        if (rd_store_release(st, q, batch, msgs + from, on_orphans_released, NULL) != 0)
            rd_warn("store: cannot hand back messages of a departed client now; their leases "
                    "will expire instead");
    }
}

int rd_store_replay_many(rd_store_t *st, rd_store_queue_t q, const char *mode,
                         const long long *ids, size_t n, int limit, const char *cursor,
                         const char *needle, rd_store_replayed_cb cb, void *arg)
{
    bool by_id = strcmp(mode, "ids") == 0;
    if (by_id && (n == 0 || n > RD_STORE_REPLAY_IDS_MAX)) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_REPLAY_MANY, q, 0);
    arg_str(c, mode);
    if (by_id) {
        for (size_t i = 0; i < n; i++) arg_int(c, ids[i]);
    } else {
        arg_int(c, limit);
        arg_str(c, cursor ? cursor : "");
        if (needle) arg_str(c, needle);
    }
    /* Hinted for the series' nudge; its reply carries no timer hint. */
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_delete(rd_store_t *st, rd_store_queue_t q, long long id, rd_store_status_cb cb,
                    void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_DELETE, q, id);
    arg_int(&c, id);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_kill(rd_store_t *st, rd_store_queue_t q, long long id, const char *reason,
                  rd_store_messages_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_KILL, q, id);
    arg_int(&c, id);
    arg_str(&c, reason ? reason : "");
    arg_int(&c, st->dead_ttl_ms);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_stats(rd_store_t *st, rd_store_queue_t q, int top, rd_store_stats_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_STATS, q, 0);
    arg_int(&c, top);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_groups(rd_store_t *st, rd_store_queue_t q, const char *cursor, size_t cursor_len,
                    int limit, rd_store_groups_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_GROUPS, q, 0);
    arg_bytes(&c, cursor ? cursor : "", cursor ? cursor_len : 0);
    arg_int(&c, limit);
    if (q.rev > 0) arg_int(&c, q.rev);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_tick(rd_store_t *st, rd_store_queue_t q, int limit, long long dead_ttl_ms,
                  long long succeeded_ttl_ms, rd_store_tick_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_TICK, q, 0);
    arg_int(&c, limit);
    arg_int(&c, dead_ttl_ms);
    arg_int(&c, succeeded_ttl_ms);
    arg_str(&c, "1");   /* a timer round: the promise and `empty` */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 0);  /* and `alerts` */
    arg_str(&c, st->series ? "1" : "0");   /* samples the time series */
    /* Queues without their own alert_url have a destination only in a fleet
     * with --alert-url (otherwise their ticks look at no stream). */
    arg_str(&c, st->alert_url || st->fleet_alert_url ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_series(rd_store_t *st, rd_store_queue_t q, const char *resolution,
                    rd_store_series_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_SERIES, q, 0);
    arg_str(&c, resolution);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_queues_page(rd_store_t *st, const char *cursor, size_t cursor_len, int limit,
                         rd_store_page_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_QUEUES_PAGE, NO_QUEUE, 0);
    arg_bytes(&c, cursor ? cursor : "", cursor ? cursor_len : 0);
    arg_int(&c, limit);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_timer_take(rd_store_t *st, int limit, long long lease_ms, int sweep_batch,
                        long long sweep_every_ms, long long sweep_cycle_ms, rd_store_taken_cb cb,
                        void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_TIMER_TAKE, NO_QUEUE, 0);
    arg_int(&c, limit);
    arg_int(&c, lease_ms);
    arg_int(&c, sweep_batch);
    arg_int(&c, sweep_every_ms);
    arg_int(&c, sweep_cycle_ms);
    arg_str(&c, st->alert_url ? "1" : "0");  /* and the alert fields */
    arg_int(&c, st->alert_recheck_ms > 0 ? st->alert_recheck_ms : 1);  /* alert lease */
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_timer_done(rd_store_t *st, long long token, const rd_timer_report_t *reports,
                        size_t n, rd_store_done_cb cb, void *arg)
{
    if (n == 0 || n > RD_STORE_REPORTS_MAX) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_TIMER_DONE, NO_QUEUE, 0);
    arg_int(c, token);
    for (size_t i = 0; i < n; i++) {
        arg_bytes(c, reports[i].queue.name, reports[i].queue.len);
        arg_int(c, reports[i].next_in_ms < 0 ? -1 : reports[i].next_in_ms);
        arg_str(c, reports[i].empty ? "1"
                   : reports[i].alerts == RD_TIMER_ALERTS_HANDOFF ? "a"
                   : reports[i].alerts == RD_TIMER_ALERTS_NONE ? "n" : "0");
    }
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_config_get(rd_store_t *st, const char *pattern, rd_store_strings_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_CONFIG_GET, NO_QUEUE, 0);
    arg_str(&c, "GET");
    arg_str(&c, pattern);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_policy_get(rd_store_t *st, rd_store_queue_t q, rd_store_policy_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_POLICY_GET, q, 0);
    return send_op(st, &c, CB(cb), arg);
}

/* policy_set in mode "replace", "merge" or "create". */
static int policy_write(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                        const char *mode, rd_store_policy_cb cb, void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    /* A queue with a policy is listed, messages or not; registered even when
     * this process registered it lately: it may have been dropped since. */
    before_write_as(st, q, true);
    const char *pairs[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    size_t n = rd_policy_args(p, pairs, values);
    cmd_t c;
    begin_op(&c, st, OP_POLICY_SET, q, 0);
    arg_str(&c, mode);
    for (size_t i = 0; i < n; i++) arg_str(&c, pairs[i]);
    /* A PATCH's nulls: those fields back to their defaults ("" in merge). */
    static const char *const stored[RD_POLICY_FIELD_COUNT][3] = {
        { "max_retries" }, { "backoff.base_seconds", "backoff.max_seconds", "backoff.jitter" },
        { "lease_seconds" }, { "dead_ttl" }, { "succeeded_ttl" }, { "max_in_flight" },
        { "rate_limit.per_second", "rate_limit.burst" }, { "dead_letter_rules" }, { "alert_url" },
        { "message_ttl" }, { "on_expiry" }, { "dead_letter_queue" }, { "group_max_in_flight" },
        { "group_rate_limit.per_second", "group_rate_limit.burst" }, { "fifo_groups" },
        { "lease_expiry" }, { "delay_seconds" }, { "max_payload_bytes" }, { "wait_seconds" },
        { "sqs" }, { "content_based_dedup" },
    };
    for (size_t i = 0; p->patch && i < RD_POLICY_FIELD_COUNT; i++) {
        if (!(p->nulls & (1u << i))) continue;
        for (size_t j = 0; j < 3 && stored[i][j]; j++) {
            arg_str(&c, stored[i][j]);
            arg_str(&c, "");
        }
    }
    if (p->rules) {
        arg_str(&c, "dead_letter_rules");
        arg_bytes(&c, p->rules, p->rules_len);
    }
    if (p->alert_url) {
        arg_str(&c, "alert_url");
        arg_bytes(&c, p->alert_url, p->alert_url_len);
    }
    if (p->dead_letter_queue) {
        arg_str(&c, "dead_letter_queue");
        arg_bytes(&c, p->dead_letter_queue, p->dead_letter_queue_len);
    }
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_policy_set(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                        rd_store_policy_cb cb, void *arg)
{
    return policy_write(st, q, p, p->patch ? "merge" : "replace", cb, arg);
}

int rd_store_policy_create(rd_store_t *st, rd_store_queue_t q, const rd_policy_t *p,
                           rd_store_policy_cb cb, void *arg)
{
    return policy_write(st, q, p, "create", cb, arg);
}

int rd_store_pause(rd_store_t *st, rd_store_queue_t q, bool paused, rd_store_policy_cb cb,
                   void *arg)
{
    if (!rd_backend_ready(st->redis)) return -1;
    before_write_as(st, q, true);  /* it writes the policy, as policy_set does */
    cmd_t c;
    begin_op(&c, st, OP_PAUSE, q, 0);
    arg_str(&c, paused ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_ping(rd_store_t *st, rd_store_status_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_PING, NO_QUEUE, 0);
    return send_op(st, &c, CB(cb), arg);
}

/* ---------------------------------------------------------------- emptying a queue, tags */

int rd_store_drop_queue(rd_store_t *st, rd_store_queue_t q, bool unregistered,
                        rd_store_cleared_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_DROP_QUEUE, q, 0);
    arg_str(&c, unregistered ? "unregistered" : "");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_purge_all(rd_store_t *st, rd_store_queue_t q, rd_store_cleared_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_PURGE_ALL, q, 0);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_queue_forget(rd_store_t *st, rd_store_queue_t q, rd_store_count_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_QUEUE_FORGET, NO_QUEUE, 0);
    arg_bytes(&c, q.name, q.len);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_dlq_sources(rd_store_t *st, rd_store_queue_t q, const char *cursor, int count,
                         rd_store_strings_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_DLQ_SOURCES, NO_QUEUE, 0);
    arg_bytes(&c, q.name, q.len);
    arg_str(&c, cursor && cursor[0] ? cursor : "0");
    arg_int(&c, count);
    return send_op(st, &c, CB(cb), arg);
}

/* tags_set (n pairs) and tags_remove (n keys): the strings as ARGV. */
static int tags_change(rd_store_t *st, op_id_t id, rd_store_queue_t q, size_t n,
                       const rd_str_t *strs, rd_store_count_cb cb, void *arg)
{
    if (n == 0 || n > 2 * RD_TAGS_MAX) return -1;
    cmd_t c;
    begin_op(&c, st, id, q, 0);
    for (size_t i = 0; i < n; i++) arg_bytes(&c, strs[i].ptr, strs[i].len);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_tags_set(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_str_t *strs,
                      rd_store_count_cb cb, void *arg)
{
    return n > RD_TAGS_MAX ? -1 : tags_change(st, OP_TAGS_SET, q, 2 * n, strs, cb, arg);
}

int rd_store_tags_remove(rd_store_t *st, rd_store_queue_t q, size_t n, const rd_str_t *keys,
                         rd_store_count_cb cb, void *arg)
{
    return n > RD_TAGS_MAX ? -1 : tags_change(st, OP_TAGS_REMOVE, q, n, keys, cb, arg);
}

int rd_store_tags_get(rd_store_t *st, rd_store_queue_t q, rd_store_strings_cb cb, void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_TAGS_GET, q, 0);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_send_move(rd_store_t *st, rd_store_move_fn_t fn, rd_store_queue_t q, size_t argc,
                       const rd_str_t *argv, rd_store_strings_cb cb, void *arg)
{
    static const op_id_t rows[] = {
        [RD_MOVE_FN_START] = OP_MOVE_START, [RD_MOVE_FN_CLAIM] = OP_MOVE_CLAIM,
        [RD_MOVE_FN_REPORT] = OP_MOVE_REPORT, [RD_MOVE_FN_CANCEL] = OP_MOVE_CANCEL,
        [RD_MOVE_FN_LIST] = OP_MOVE_LIST, [RD_MOVE_FN_WATCH] = OP_MOVE_WATCH,
        [RD_MOVE_FN_DUE] = OP_MOVE_DUE,
    };
    assert((size_t)fn < sizeof rows / sizeof rows[0] && argc <= RD_MOVE_FN_ARGS_MAX);
    cmd_t c;
    begin_op(&c, st, rows[fn], ops[rows[fn]].flags & F_REGISTRY ? NO_QUEUE : q, 0);
    for (size_t i = 0; i < argc; i++) arg_bytes(&c, argv[i].ptr ? argv[i].ptr : "", argv[i].len);
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_send_shards(rd_store_t *st, rd_store_shards_fn_t fn, rd_store_queue_t q,
                         size_t argc, const rd_str_t *argv, rd_store_strings_cb cb, void *arg)
{
    static const op_id_t rows[] = {
        [RD_SHARDS_FN_SET] = OP_SHARDS_SET, [RD_SHARDS_FN_COPY] = OP_POLICY_COPY,
        [RD_SHARDS_FN_RETIRE] = OP_SHARD_RETIRE, [RD_SHARDS_FN_SCAN] = OP_SHARD_SCAN,
        [RD_SHARDS_FN_POLICY_PAIRS] = OP_POLICY_PAIRS,
        [RD_SHARDS_FN_LIBRARIES] = OP_LIBRARIES,
    };
    assert((size_t)fn < sizeof rows / sizeof rows[0]);
    cmd_t c;
    begin_op(&c, st, rows[fn], q, 0);
    const char **all = c.argv;
    size_t *lens = c.lens;
    size_t total = (size_t)c.argc + argc;
    if (total > MAX_ARGS) {   /* a copy of a long policy: argv of its own */
        all = rd_malloc(total * sizeof *all);
        lens = rd_malloc(total * sizeof *lens);
        memcpy(all, c.argv, (size_t)c.argc * sizeof *all);
        memcpy(lens, c.lens, (size_t)c.argc * sizeof *lens);
    }
    for (size_t i = 0; i < argc; i++) {
        all[c.argc + i] = argv[i].ptr ? argv[i].ptr : "";
        lens[c.argc + i] = argv[i].len;
    }
    int rc = send_argv(st, &c, (int)total, all, lens, CB(cb), arg);
    if (all != c.argv) {
        rd_free(all);
        rd_free(lens);
    }
    return rc;
}

int rd_store_send_row(rd_store_t *st, rd_store_row_t row, rd_store_queue_t q, size_t argc,
                      const rd_str_t *argv, void *kept, void (*kept_free)(void *kept),
                      void (*cb)(void), void *arg)
{
    static const op_id_t rows[] = {
        [RD_ROW_ENQUEUE] = OP_ENQUEUE, [RD_ROW_ENQUEUE_MANY] = OP_ENQUEUE_MANY,
        [RD_ROW_REDRIVE_TAKE] = OP_REDRIVE_TAKE, [RD_ROW_REDRIVE_IN] = OP_REDRIVE_IN,
        [RD_ROW_REDRIVE_DONE] = OP_REDRIVE_DONE, [RD_ROW_REDRIVE_FORGET] = OP_REDRIVE_FORGET,
    };
    assert((size_t)row < sizeof rows / sizeof rows[0]);
    cmd_t c;
    begin_op(&c, st, rows[row], q, 0);
    size_t total = (size_t)c.argc + argc;
    const char **all = rd_malloc(total * sizeof *all);
    size_t *lens = rd_malloc(total * sizeof *lens);
    memcpy(all, c.argv, (size_t)c.argc * sizeof *all);
    memcpy(lens, c.lens, (size_t)c.argc * sizeof *lens);
    for (size_t i = 0; i < argc; i++) {
        all[c.argc + i] = argv[i].ptr ? argv[i].ptr : "";
        lens[c.argc + i] = argv[i].len;
    }
    c.kept = kept;
    c.kept_free = kept_free;
    int rc = send_argv(st, &c, (int)total, all, lens, cb, arg);   /* frees kept on failure */
    rd_free(all);
    rd_free(lens);
    return rc;
}

/* ---------------------------------------------------------------- alerts */

int rd_store_alerts_take(rd_store_t *st, rd_store_queue_t q, const char *consumer, int count,
                         long long min_idle_ms, bool alert_url, rd_store_alerts_taken_cb cb,
                         void *arg)
{
    cmd_t c;
    begin_op(&c, st, OP_ALERTS_TAKE, q, 0);
    arg_str(&c, consumer);
    arg_int(&c, count);
    arg_int(&c, min_idle_ms);
    arg_str(&c, alert_url ? "1" : "0");
    return send_op(st, &c, CB(cb), arg);
}

int rd_store_alerts_ack(rd_store_t *st, rd_store_queue_t q, size_t n, const char *const *sids,
                        rd_store_count_cb cb, void *arg)
{
    if (n == 0 || n + 4 > MAX_ARGS) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_ALERTS_ACK, q, 0);
    for (size_t i = 0; i < n; i++) arg_str(c, sids[i]);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

int rd_store_alerts_touch(rd_store_t *st, rd_store_queue_t q, const char *consumer,
                          long long failures, size_t n, const char *const *sids,
                          rd_store_strings_cb cb, void *arg)
{
    if (n + 6 > MAX_ARGS) return -1;
    cmd_t *c = rd_malloc(sizeof *c);
    begin_op(c, st, OP_ALERTS_TOUCH, q, 0);
    arg_str(c, consumer);
    arg_int(c, failures);
    for (size_t i = 0; i < n; i++) arg_str(c, sids[i]);
    int rc = send_op(st, c, CB(cb), arg);
    rd_free(c);
    return rc;
}

/* The redrive's calls: store_redrive.c. */

