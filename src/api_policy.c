/* api_policy.c - the queue's policy routes: GET, PUT and PATCH
 * /queues/{q}/policy, pause and resume (docs/reference.md "Queue policy and
 * flow control", docs/flow-control.md). */
#include "retryd/api_call.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/shard_admin.h"
#include "retryd/waiters.h"

typedef rd_call_t call_t;

/* A resume or a new policy may let this instance's waiters lease now (the
 * function also published the wake for every other instance). */
static void wake_local(call_t *c)
{
    if (!c->notify || c->api->waiters == NULL) return;
    rd_store_queue_t q = { .name = c->match.queue, .len = c->match.queue_len };
    rd_waiters_notify(c->api->waiters, q);
}

static void on_policy(const rd_store_policy_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    wake_local(c);
    const rd_config_t *cfg = c->api->cfg;
    rd_policy_defaults_t d = { cfg->lease_ms, cfg->dead_ttl_ms, cfg->succeeded_ttl_ms };
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_policy_write_json(&w, &res->policy, &d, c->match.queue, c->match.queue_len);
    rd_api_respond_written(c, 200, NULL);
}

/* A change of shards or a copy that did not go through: 409 with why, or
 * the store's failure. True when it answered. */
static bool respond_shards_refusal(call_t *c, const rd_shard_admin_result_t *res)
{
    switch (res->status) {
    case RD_SHARD_ADMIN_OK:
        return false;
    case RD_SHARD_ADMIN_SETTLING:
    case RD_SHARD_ADMIN_UPGRADE_PENDING:
    case RD_SHARD_ADMIN_NOT_EMPTY:
    case RD_SHARD_ADMIN_LIMITED:
        rd_api_respond_problem(c, RD_PROBLEM_INVALID_STATE, res->detail, NULL, NULL);
        return true;
    case RD_SHARD_ADMIN_STORE:
        if (!rd_api_respond_store_failure(c, &res->head))
            rd_api_respond_problem(c, RD_PROBLEM_INTERNAL, "Redis answered with an error; see "
                                   "the log.", NULL, NULL);
        return true;
    }
    return false;
}

static void on_paused_copied(const rd_shard_admin_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_shards_refusal(c, res)) return;
    wake_local(c);
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "queue");
    rd_jsonw_stringn(&w, c->match.queue, c->match.queue_len);
    rd_jsonw_key(&w, "paused");
    rd_jsonw_bool(&w, c->paused);
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}

/* The pause is written on shard 0; a sharded queue's shards get it with
 * their copies before the answer (docs/sharding.md "Every API over all
 * shards"). */
static void on_paused(const rd_store_policy_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    c->paused = res->policy.paused;
    if (res->policy.shards > 1) {
        rd_api_started(c, rd_shard_admin_copy(c->api->store, rd_api_queue_of(c), on_paused_copied,
                                              c));
        return;
    }
    on_paused_copied(&(rd_shard_admin_result_t){ .status = RD_SHARD_ADMIN_OK, .shards = 1 }, c);
}

/* A sharded queue's new policy reached every shard: the answer is the
 * policy as read now. */
static void on_policy_copied(const rd_shard_admin_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_shards_refusal(c, res)) return;
    rd_api_started(c, rd_store_policy_get(c->api->store, rd_api_queue_of(c), on_policy, c));
}

static void on_policy_written(const rd_store_policy_t *res, void *arg)
{
    call_t *c = arg;
    if (res->head.status == RD_STORE_INVALID_STATE) {   /* a limit on a sharded queue */
        char detail[240];
        snprintf(detail, sizeof detail, "the queue has shards above 1: %.*s; nothing was changed.",
                 (int)res->head.detail.len, res->head.detail.ptr);
        rd_api_respond_problem(c, RD_PROBLEM_INVALID_STATE, detail, NULL, NULL);
        return;
    }
    if (res->head.status == RD_STORE_OK && res->policy.shards > 1) {
        rd_api_started(c, rd_shard_admin_copy(c->api->store, rd_api_queue_of(c),
                                              on_policy_copied, c));
        return;
    }
    on_policy(res, arg);
}

void rd_api_handle_policy_get(call_t *c)
{
    rd_api_started(c, rd_store_policy_get(c->api->store, rd_api_queue_of(c), on_policy, c));
}

/* dlq_link answered: the target leads into no cycle (and is recorded), so
 * the policy is written; else 422 on dead_letter_queue, nothing written. */
/* The fields last: everything that could refuse the request has passed. */
static void set_fields(call_t *c)
{
    rd_api_started(c, rd_store_policy_set(c->api->store, rd_api_queue_of(c), c->policy,
                                          on_policy_written, c));
}

static void on_shards_changed(const rd_shard_admin_result_t *res, void *arg)
{
    call_t *c = arg;
    if (respond_shards_refusal(c, res)) return;
    set_fields(c);
}

/* A `shards` given changes the count (src/shard_admin.c) before the fields:
 * a refused change writes nothing. */
static void change_then_set(call_t *c)
{
    if (c->policy->shards > 0) {
        rd_api_started(c, rd_shard_admin_change(c->api->store, rd_api_queue_of(c),
                                                (int)c->policy->shards, on_shards_changed, c));
        return;
    }
    set_fields(c);
}

/* dlq_link answered: the target leads into no cycle (and is recorded), so
 * the policy is written; else 422 on dead_letter_queue, nothing written. */
static void on_dlq_linked(const rd_store_strings_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    const rd_str_t *first = res->count > 0 ? &res->strings[0] : NULL;
    if (first == NULL || first->ptr == NULL || first->len != 2 || memcmp(first->ptr, "ok",
                                                                         2) != 0) {
        bool cycle = first && first->ptr && first->len == 5 && memcmp(first->ptr, "cycle", 5) == 0;
        rd_field_errors_t errs = { .count = 0 };
        rd_field_errors_add(&errs, "dead_letter_queue", "invalid",
                            cycle ? "dead_letter_queue leads back to this queue (a cycle of "
                                    "dead-letter queues)."
                                  : "dead_letter_queue starts a chain of more than 100 queues.");
        rd_api_answer_parse_failure(c, RD_REQ_INVALID, &errs);
        return;
    }
    change_then_set(c);
}

static void link_then_write(call_t *c);

/* The stored policy for a request that sets a limit or shards above 1: a
 * queue has either shards above 1 or max_in_flight/rate_limit (docs/
 * reference.md "Shards"), refused here before the dead-letter graph is
 * written. The change's own call checks again, atomically (policy_set's and
 * shards_set's "limited"), for a write that meets another meanwhile. */
static void on_limits_read(const rd_store_policy_t *res, void *arg)
{
    call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    const rd_policy_t *p = c->policy, *stored = &res->policy;
    long long shards = p->shards > 0 ? p->shards : stored->shards;
    bool given_cap = p->max_in_flight >= 0 || (p->nulls & RD_POLICY_NULL(max_in_flight));
    bool given_rate = p->per_second > 0 || (p->nulls & RD_POLICY_NULL(rate_limit));
    bool kept = p->patch;   /* a PUT replaces every field it does not give */
    bool cap = given_cap ? p->max_in_flight > 0 : kept && stored->max_in_flight > 0;
    bool rate = given_rate ? p->per_second > 0 : kept && stored->per_second > 0;
    if (p->shards > 1 && !p->patch) cap = stored->max_in_flight > 0, rate = stored->per_second > 0;
    if (shards > 1 && (cap || rate)) {
        char detail[240];
        snprintf(detail, sizeof detail,
                 "the queue would have shards above 1 and %s, which is not yet held across "
                 "shards; nothing was changed.", cap ? "max_in_flight" : "rate_limit");
        rd_api_respond_problem(c, RD_PROBLEM_INVALID_STATE, detail, NULL, NULL);
        return;
    }
    link_then_write(c);
}

/* With a dead_letter_queue, the graph of dead-letter queues first (the
 * registry's slot), then the count, then the policy (the queue's):
 * docs/lifecycle.md "Cycles". */
static void write_policy(call_t *c)
{
    const rd_policy_t *p = c->policy;
    if (p->max_in_flight > 0 || p->per_second > 0 || p->shards > 1) {
        rd_api_started(c, rd_store_policy_get(c->api->store, rd_api_queue_of(c), on_limits_read, c));
        return;
    }
    link_then_write(c);
}

static void link_then_write(call_t *c)
{
    const rd_policy_t *p = c->policy;
    if (p->patch && !p->dead_letter_queue && !(p->nulls & RD_POLICY_NULL(dead_letter_queue))) {
        change_then_set(c);
        return;
    }
    rd_store_queue_t target = { .name = p->dead_letter_queue, .len = p->dead_letter_queue_len };
    rd_api_started(c, rd_store_dlq_link(c->api->store, rd_api_queue_of(c), target, on_dlq_linked,
                                        c));
}

/* PUT replaces the whole policy; PATCH changes the fields given (null puts
 * one back to its default). */
static void policy_write(call_t *c, bool patch)
{
    rd_policy_t p;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_policy(c->req->body, c->req->body_len, &p, &errs);
    p.patch = patch;
    if (r == RD_REQ_OK && p.dead_letter_queue && p.dead_letter_queue_len == c->match.queue_len &&
        memcmp(p.dead_letter_queue, c->match.queue, c->match.queue_len) == 0) {
        rd_policy_free(&p);
        rd_field_errors_add(&errs, "dead_letter_queue", "invalid",
                            "dead_letter_queue must be another queue, not this one.");
        r = RD_REQ_INVALID;
    }
    if (r == RD_REQ_OK && p.shards > 1 && !c->api->cfg->allow_shards) {
        /* Until a change of shards is built whole (docs/sharding.md
         * "Implementation plan"), a queue keeps one shard. */
        rd_policy_free(&p);
        rd_field_errors_add(&errs, "shards", "invalid",
                            "shards must be 1: spreading one queue over several shards is not "
                            "enabled in this release.");
        r = RD_REQ_INVALID;
    }
    if (r == RD_REQ_OK && p.shards > 1 && (p.max_in_flight > 0 || p.per_second > 0)) {
        /* Each shard would hold the whole limit (docs/sharding.md "max_in_flight
         * and rate_limit"): refused until quotas across shards are built. The
         * stored policy is checked by the library, in the same call as the
         * change (shards_set, policy_set). */
        rd_policy_free(&p);
        rd_field_errors_add(&errs, "shards", "invalid",
                            "shards above 1 cannot be combined with max_in_flight or rate_limit "
                            "in this release: the limits are not yet held across shards.");
        r = RD_REQ_INVALID;
    }
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, &errs);
        return;
    }
    /* Deaths would move into the target: the token must cover it too. */
    if (p.dead_letter_queue && !rd_api_authorize_queue(c, p.dead_letter_queue,
                                                       p.dead_letter_queue_len,
                                                       "dead_letter_queue")) {
        rd_policy_free(&p);
        return;
    }
    c->notify = true;
    c->policy = rd_malloc(sizeof *c->policy);
    *c->policy = p;
    write_policy(c);
}

void rd_api_handle_policy_put(call_t *c)
{
    policy_write(c, false);
}

void rd_api_handle_policy_patch(call_t *c)
{
    policy_write(c, true);
}

void rd_api_handle_pause(call_t *c)
{
    rd_req_result_t r = rd_request_empty(c->req->body, c->req->body_len);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, NULL);
        return;
    }
    rd_api_started(c, rd_store_pause(c->api->store, rd_api_queue_of(c), true, on_paused, c));
}

void rd_api_handle_resume(call_t *c)
{
    rd_req_result_t r = rd_request_empty(c->req->body, c->req->body_len);
    if (r != RD_REQ_OK) {
        rd_api_answer_parse_failure(c, r, NULL);
        return;
    }
    c->notify = true;
    rd_api_started(c, rd_store_pause(c->api->store, rd_api_queue_of(c), false, on_paused, c));
}
