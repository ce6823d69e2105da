/* shard_admin.c - a change of a queue's shards, and the copies of its policy
 * (docs/sharding.md sections 6 and 7). One job per change: it reads shard
 * 0's policy and layout, checks the loaded libraries, then walks the steps
 * of a raise or a lowering one call at a time (the copies in parallel). */
#include "retryd/shard_admin.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/keys.h"
#include "retryd/log.h"
#include "retryd/shard_round.h"
#include "retryd/shards.h"

typedef struct job {
    rd_store_t *st;
    char *name;
    size_t len;
    int to;                     /* change: the count asked for; copy: 0 */
    int n;                      /* the count shard 0 had when read */
    int hw;                     /* the most shards it ever had */
    uint16_t salts[RD_SHARDS_MAX - 1];
    int nsalts;
    int next;                   /* a lowering's walk: the shard of its next call */
    int retired_low;            /* shards retired_low..n-1 are (maybe) fenced: the undo
                                   unfences them (n: none) */
    int lowering;               /* the layout's lowering when read (0: none) */
    char fence[24];             /* the lowering's rev, which its retires record */
    bool recovering;            /* undoing an abandoned lowering, then the change */
    bool raised;                /* a raise was written: its first round at the end */
    int pending;                /* copies in flight */
    rd_shard_admin_result_t res;
    char detail[256];
    rd_shard_admin_cb cb;
    void *arg;
} job_t;

static rd_store_queue_t shard_q(const job_t *j, int shard)
{
    return (rd_store_queue_t){ .name = j->name, .len = j->len, .shard = shard,
                               .salts = j->salts, .nsalts = j->nsalts };
}

static job_t *job_new(rd_store_t *st, rd_store_queue_t q, int to, rd_shard_admin_cb cb, void *arg)
{
    job_t *j = rd_calloc(1, sizeof *j);
    j->st = st;
    j->name = rd_strndup(q.name, q.len);
    j->len = q.len;
    j->to = to;
    j->cb = cb;
    j->arg = arg;
    return j;
}

static void finish(job_t *j)
{
    if (j->res.detail == NULL && j->detail[0]) j->res.detail = j->detail;
    /* A raise's first round at once: one that has nothing to wait for (no
     * group lives on an old shard) closes now, another is due each second. */
    if (j->raised && j->res.status == RD_SHARD_ADMIN_OK) {
        rd_store_queue_t q = { .name = j->name, .len = j->len };
        if (rd_shard_round(j->st, q, NULL, NULL) != 0)
            rd_warn("shards: %.*s: the raise's first round could not be sent", (int)j->len, j->name);
    }
    j->cb(&j->res, j->arg);
    rd_free(j->name);
    rd_free(j);
}

/* A store call failed: the job ends with its outcome (the detail copied, the
 * result it points into is freed after the callback). */
static void fail_store(job_t *j, const rd_store_head_t *head)
{
    j->res.status = RD_SHARD_ADMIN_STORE;
    j->res.head.status = head->status;
    snprintf(j->detail, sizeof j->detail, "%.*s", head->detail.ptr ? (int)head->detail.len : 0,
             head->detail.ptr ? head->detail.ptr : "");
    j->res.head.detail = (rd_str_t){ j->detail, strlen(j->detail) };
    j->res.detail = NULL;
    finish(j);
}

/* A call that could not be sent ends the job as unavailable. */
static void unsent(job_t *j)
{
    rd_store_head_t head = { .status = RD_STORE_UNAVAILABLE };
    fail_store(j, &head);
}

static void refuse(job_t *j, rd_shard_admin_status_t status, const char *detail)
{
    j->res.status = status;
    snprintf(j->detail, sizeof j->detail, "%s", detail);
    finish(j);
}

static bool is(const rd_str_t *s, const char *lit)
{
    return s->ptr && s->len == strlen(lit) && memcmp(s->ptr, lit, s->len) == 0;
}

/* Reads what the job needs of policy_get's pairs: the count, the most it
 * had, the salts; true when a change has not settled (from, lowering). */
static bool read_layout(job_t *j, const rd_store_strings_t *res)
{
    bool settling = false;
    j->n = 1;
    j->hw = 1;
    j->nsalts = 0;
    j->lowering = 0;
    for (size_t i = 0; i + 1 < res->count; i += 2) {
        const rd_str_t *f = &res->strings[i], *v = &res->strings[i + 1];
        if (is(f, "shards")) j->n = (int)rd_str_number(v);
        else if (is(f, "layout.hw")) j->hw = (int)rd_str_number(v);
        else if (is(f, "layout.from")) settling = true;
        else if (is(f, "layout.lowering")) j->lowering = (int)rd_str_number(v);
        else if (is(f, "layout.salts") && v->ptr) {
            const char *p = v->ptr, *end = v->ptr + v->len;
            while (p < end && j->nsalts < RD_SHARDS_MAX - 1) {
                j->salts[j->nsalts++] = (uint16_t)strtol(p, NULL, 10);
                const char *comma = memchr(p, ',', (size_t)(end - p));
                p = comma ? comma + 1 : end;
            }
        }
    }
    if (j->n < 1 || j->n > RD_SHARDS_MAX) j->n = 1;
    return settling || j->lowering > 0;
}

/* ---------------------------------------------------------------- copies */

static void on_copied(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    /* "ok"; "stale": the shard holds a newer copy already; "outside": the
     * count changed since the read, the newer change copies. */
    if (res->head.status != RD_STORE_OK && j->res.status == RD_SHARD_ADMIN_OK) {
        j->res.status = RD_SHARD_ADMIN_STORE;
        j->res.head.status = res->head.status;
        snprintf(j->detail, sizeof j->detail, "%.*s",
                 res->head.detail.ptr ? (int)res->head.detail.len : 0,
                 res->head.detail.ptr ? res->head.detail.ptr : "");
        j->res.head.detail = (rd_str_t){ j->detail, strlen(j->detail) };
    }
    if (--j->pending == 0) finish(j);
}

static void on_copy_read(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail_store(j, &res->head);
        return;
    }
    read_layout(j, res);
    j->res.shards = j->n;
    if (j->n <= 1) {
        finish(j);
        return;
    }
    /* The pairs are borrowed: every copy is sent (its argv copied by the
     * link) before this returns. */
    j->pending = 1;
    int upto = j->lowering > 0 && j->lowering < j->n ? j->lowering : j->n;
    for (int k = 1; k < upto; k++) {
        j->pending++;
        if (rd_store_policy_copy(j->st, shard_q(j, k), res->strings, res->count, on_copied, j) != 0) {
            j->pending--;
            if (j->res.status == RD_SHARD_ADMIN_OK) {
                j->res.status = RD_SHARD_ADMIN_STORE;
                j->res.head.status = RD_STORE_UNAVAILABLE;
            }
        }
    }
    if (--j->pending == 0) finish(j);
}

static int start_copy(job_t *j)
{
    return rd_store_policy_pairs(j->st, shard_q(j, 0), on_copy_read, j);
}

int rd_shard_admin_copy(rd_store_t *st, rd_store_queue_t q, rd_shard_admin_cb cb, void *arg)
{
    job_t *j = job_new(st, q, 0, cb, arg);
    if (start_copy(j) != 0) {
        rd_free(j->name);
        rd_free(j);
        return -1;
    }
    return 0;
}

/* After the count changed on shard 0: the copies, then the answer. */
static void copy_then_finish(job_t *j)
{
    if (start_copy(j) != 0) unsent(j);
}

/* ---------------------------------------------------------------- raise */

static void on_raised(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail_store(j, &res->head);
        return;
    }
    const rd_str_t *code = res->count ? &res->strings[0] : NULL;
    if (code && is(code, "ok")) {
        j->raised = true;
        copy_then_finish(j);
        return;
    }
    if (code && is(code, "settling")) {
        refuse(j, RD_SHARD_ADMIN_SETTLING, "a change of shards has not settled yet; nothing was "
                                           "changed.");
        return;
    }
    if (code && is(code, "limited") && res->count > 2) {
        char why[200];
        snprintf(why, sizeof why, "the queue's %.*s; nothing was changed.",
                 (int)res->strings[2].len, res->strings[2].ptr);
        refuse(j, RD_SHARD_ADMIN_LIMITED, why);
        return;
    }
    rd_store_head_t head = { .status = RD_STORE_ERROR,
                             .detail = res->count > 2 ? res->strings[2] : (rd_str_t){ 0 } };
    fail_store(j, &head);
}

static void raise_to(job_t *j)
{
    /* On one Redis every salt is 0; a shard the queue had keeps its own. */
    char salts[RD_SHARDS_MAX * 7];
    size_t n = 0;
    salts[0] = '\0';
    for (int k = 1; k < j->to; k++)
        n += (size_t)snprintf(salts + n, sizeof salts - n, "%s%u", k > 1 ? "," : "",
                              k <= j->nsalts ? (unsigned)j->salts[k - 1] : 0u);
    if (rd_store_shards_set(j->st, shard_q(j, 0), "raise", j->to, salts, on_raised, j) != 0)
        unsent(j);
}

/* ---------------------------------------------------------------- lower */

static void lower_step(job_t *j);
static void undo_step(job_t *j);

/* A failure once the lowering began: noted, then the undo (a lowering left
 * half done would hold every later change back until it is abandoned). */
static void fail_and_undo(job_t *j, rd_store_status_t status, const rd_str_t *detail)
{
    j->res.status = RD_SHARD_ADMIN_STORE;
    j->res.head.status = status;
    snprintf(j->detail, sizeof j->detail, "%.*s", detail && detail->ptr ? (int)detail->len : 0,
             detail && detail->ptr ? detail->ptr : "");
    j->res.head.detail = (rd_str_t){ j->detail, strlen(j->detail) };
    j->next = j->n - 1;
    undo_step(j);
}

static void on_shards_set_step(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    bool begun = j->next != j->n - 1 || j->fence[0];   /* not lower_begin's own reply */
    if (res->head.status != RD_STORE_OK) {
        /* lower_begin lost: it may have been applied; undo (abort) to be sure. */
        fail_and_undo(j, res->head.status, &res->head.detail);
        return;
    }
    const rd_str_t *code = res->count ? &res->strings[0] : NULL;
    if (code && is(code, "settling") && !begun) {
        refuse(j, RD_SHARD_ADMIN_SETTLING, "a change of shards has not settled yet; nothing was "
                                           "changed.");
        return;
    }
    if (!(code && is(code, "ok"))) {
        fail_and_undo(j, RD_STORE_ERROR, code);
        return;
    }
    if (!begun) {   /* lower_begin: its rev is the fence its retires record */
        for (size_t i = 1; i + 1 < res->count; i += 2)
            if (is(&res->strings[i], "rev"))
                snprintf(j->fence, sizeof j->fence, "%.*s", (int)res->strings[i + 1].len,
                         res->strings[i + 1].ptr);
        if (!j->fence[0]) {
            fail_and_undo(j, RD_STORE_ERROR, NULL);
            return;
        }
    }
    lower_step(j);
}

/* "not_empty", index, count, ...: the detail of the 409. */
static void note_holdings(job_t *j, int shard, const rd_store_strings_t *res)
{
    size_t n = (size_t)snprintf(j->detail, sizeof j->detail,
                                "shard %d of the queue holds messages (", shard);
    for (size_t i = 1; i + 1 < res->count && n < sizeof j->detail; i += 2)
        n += (size_t)snprintf(j->detail + n, sizeof j->detail - n, "%s%.*s %.*s",
                              i > 1 ? ", " : "", (int)res->strings[i].len,
                              res->strings[i].ptr ? res->strings[i].ptr : "",
                              (int)res->strings[i + 1].len,
                              res->strings[i + 1].ptr ? res->strings[i + 1].ptr : "");
    if (n < sizeof j->detail)
        snprintf(j->detail + n, sizeof j->detail - n,
                 "): lowering shards needs a queue without messages in any state; nothing was "
                 "changed.");
}

static void on_retire(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK || res->count == 0) {
        /* Unknown whether it fenced: undo from it on. */
        if (j->next >= j->to) j->retired_low = j->next;
        fail_and_undo(j, res->head.status != RD_STORE_OK ? res->head.status : RD_STORE_ERROR,
                      &res->head.detail);
        return;
    }
    const rd_str_t *code = res->count ? &res->strings[0] : NULL;
    if (code && is(code, "not_empty")) {
        j->res.status = RD_SHARD_ADMIN_NOT_EMPTY;
        note_holdings(j, j->next, res);
        j->next = j->n - 1;
        undo_step(j);
        return;
    }
    if (j->next >= j->to) j->retired_low = j->next;
    j->next--;
    lower_step(j);
}

/* The walk: fence shards n-1 down to `to`, then check to-1 down to 0, then
 * commit on shard 0. next == n: begin. */
static void lower_step(job_t *j)
{
    int rc;
    if (j->next == j->n) {
        j->next = j->n - 1;
        rc = rd_store_shards_set(j->st, shard_q(j, 0), "lower_begin", j->to, NULL,
                                 on_shards_set_step, j);
    } else if (j->next >= j->to) {
        rc = rd_store_shard_retire(j->st, shard_q(j, j->next), "retire", j->fence, on_retire, j);
    } else if (j->next >= 0) {
        rc = rd_store_shard_retire(j->st, shard_q(j, j->next), "check", NULL, on_retire, j);
    } else if (j->next == -1) {
        j->next = -2;
        rc = rd_store_shards_set(j->st, shard_q(j, 0), "lower_commit", j->to, NULL,
                                 on_shards_set_step, j);
    } else {
        j->lowering = 0;
        copy_then_finish(j);
        return;
    }
    if (rc != 0) {
        rd_store_head_t head = { .status = RD_STORE_UNAVAILABLE };
        fail_and_undo(j, head.status, NULL);
    }
}

static void on_change_read(const rd_store_strings_t *res, void *arg);

static void on_undone(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK)
        rd_warn("shards: undoing a lowering of %.*s failed (%d); a change of its shards more "
                "than 10 s later undoes it", (int)j->len, j->name, res->head.status);
    undo_step(j);
}

/* Takes back what a lowering did: unretire n-1 down to retired_low, then
 * lower_abort; then the job ends with the refusal already noted, or (an
 * abandoned lowering undone) goes on with its own change. */
static void undo_step(job_t *j)
{
    int rc;
    if (j->next >= j->retired_low && j->next >= 1) {
        int k = j->next--;
        rc = rd_store_shard_retire(j->st, shard_q(j, k), "unretire", NULL, on_undone, j);
    } else if (j->next != -3) {
        j->next = -3;
        rc = rd_store_shards_set(j->st, shard_q(j, 0), "lower_abort", 0, NULL, on_undone, j);
    } else if (j->recovering) {
        j->recovering = false;
        rc = rd_store_policy_pairs(j->st, shard_q(j, 0), on_change_read, j);
        if (rc != 0) unsent(j);
        return;
    } else {
        finish(j);
        return;
    }
    if (rc != 0) {   /* the link is down: the refusal stands; a later change undoes it */
        if (j->recovering) unsent(j);
        else finish(j);
    }
}

/* A lowering found running when the change was read: abandoned (its driver
 * went away), it is undone and the change goes on; else 409. */
static void on_stale_checked(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail_store(j, &res->head);
        return;
    }
    const rd_str_t *code = res->count ? &res->strings[0] : NULL;
    if (code && is(code, "abandoned") && res->count == 2) {
        int m = (int)rd_str_number(&res->strings[1]);
        j->recovering = true;
        j->retired_low = m >= 1 ? m : 1;
        j->next = j->n - 1;
        j->fence[0] = '\0';
        rd_info("shards: undoing an abandoned lowering of %.*s to %d", (int)j->len, j->name, m);
        undo_step(j);
        return;
    }
    if (code && is(code, "ok")) {   /* it ended meanwhile: read again */
        if (rd_store_policy_pairs(j->st, shard_q(j, 0), on_change_read, j) != 0) unsent(j);
        return;
    }
    refuse(j, RD_SHARD_ADMIN_SETTLING, "a change of shards has not settled yet; nothing was "
                                       "changed.");
}

/* ---------------------------------------------------------------- the change */

/* A library of a retryd release: "retryd_v<digits>" (docs/operators.md
 * "Rolling upgrade"), not another one that starts with "retryd". */
static bool is_release_library(const rd_str_t *lib)
{
    static const char stem[] = "retryd_v";
    size_t n = sizeof stem - 1;
    if (lib->ptr == NULL || lib->len <= n || memcmp(lib->ptr, stem, n) != 0) return false;
    for (size_t i = n; i < lib->len; i++)
        if (lib->ptr[i] < '0' || lib->ptr[i] > '9') return false;
    return true;
}

static void on_libraries(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail_store(j, &res->head);
        return;
    }
    for (size_t i = 0; i < res->count; i++) {
        const rd_str_t *lib = &res->strings[i];
        if (!is_release_library(lib) || is(lib, RD_LIBRARY_NAME)) continue;
        snprintf(j->detail, sizeof j->detail,
                 "the library %.*s of another retryd release is loaded: finish the rolling "
                 "upgrade (docs/operators.md) before changing shards; nothing was changed.",
                 (int)lib->len, lib->ptr);
        j->res.status = RD_SHARD_ADMIN_UPGRADE_PENDING;
        finish(j);
        return;
    }
    if (j->to > j->n) {
        raise_to(j);
        return;
    }
    j->next = j->n;
    j->retired_low = j->n;
    j->fence[0] = '\0';
    lower_step(j);
}

static void on_change_read(const rd_store_strings_t *res, void *arg)
{
    job_t *j = arg;
    if (res->head.status != RD_STORE_OK) {
        fail_store(j, &res->head);
        return;
    }
    bool settling = read_layout(j, res);
    j->res.shards = j->n;
    if (j->to == j->n && j->lowering == 0) {
        finish(j);
        return;
    }
    if (j->lowering > 0) {
        if (rd_store_shards_set(j->st, shard_q(j, 0), "lower_stale", 0, NULL, on_stale_checked,
                                j) != 0)
            unsent(j);
        return;
    }
    if (settling) {
        refuse(j, RD_SHARD_ADMIN_SETTLING,
               "a change of shards has not settled yet; nothing was changed.");
        return;
    }
    j->res.shards = j->to;
    if (rd_store_libraries(j->st, on_libraries, j) != 0) unsent(j);
}

int rd_shard_admin_change(rd_store_t *st, rd_store_queue_t q, int to, rd_shard_admin_cb cb,
                          void *arg)
{
    if (to < 1 || to > RD_SHARDS_MAX) return -1;
    job_t *j = job_new(st, q, to, cb, arg);
    if (rd_store_policy_pairs(st, shard_q(j, 0), on_change_read, j) != 0) {
        rd_free(j->name);
        rd_free(j);
        return -1;
    }
    return 0;
}
