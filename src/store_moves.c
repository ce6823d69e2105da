/* store_moves.c - the message move tasks' store calls (lua/67_moves.lua,
 * docs/sqs.md "Message move tasks"): their ARGV, and a task read from a
 * reply. The rows are in store.c's table. */
#include "retryd/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

/* An integer as an argument: kept in the caller's buffer. */
static rd_str_t num(char buf[24], long long v)
{
    int n = snprintf(buf, 24, "%lld", v);
    return (rd_str_t){ buf, (size_t)n };
}

static rd_str_t text(const char *s)
{
    return (rd_str_t){ s ? s : "", s ? strlen(s) : 0 };
}

static bool parse_ll(const rd_str_t *s, long long *out)
{
    if (s->ptr == NULL || s->len == 0 || s->len > 20) return false;
    char buf[24];
    memcpy(buf, s->ptr, s->len);
    buf[s->len] = '\0';
    char *end;
    *out = strtoll(buf, &end, 10);
    return *end == '\0';
}

bool rd_store_move_task_at(const rd_store_strings_t *res, size_t at, rd_store_move_task_t *out)
{
    if (at + RD_STORE_MOVE_TASK_FIELDS > res->count) return false;
    const rd_str_t *f = res->strings + at;
    for (size_t i = 0; i < RD_STORE_MOVE_TASK_FIELDS; i++)
        if (f[i].ptr == NULL) return false;
    *out = (rd_store_move_task_t){ .status = f[1], .destination = f[2], .reason = f[7] };
    return parse_ll(&f[0], &out->id) && parse_ll(&f[3], &out->rate) &&
           parse_ll(&f[4], &out->started_ms) && parse_ll(&f[5], &out->moved) &&
           parse_ll(&f[6], &out->to_move);
}

int rd_store_move_start(rd_store_t *st, rd_store_queue_t source, rd_store_queue_t destination,
                        long long rate, const char *runner, long long lease_ms,
                        rd_store_strings_cb cb, void *arg)
{
    char r[24], l[24];
    rd_str_t argv[] = { { destination.name ? destination.name : "", destination.len },
                        num(r, rate), text(runner), num(l, lease_ms) };
    return rd_store_send_move(st, RD_MOVE_FN_START, source, 4, argv, cb, arg);
}

int rd_store_move_claim(rd_store_t *st, rd_store_queue_t source, const char *runner,
                        long long lease_ms, rd_store_strings_cb cb, void *arg)
{
    char l[24];
    rd_str_t argv[] = { text(runner), num(l, lease_ms) };
    return rd_store_send_move(st, RD_MOVE_FN_CLAIM, source, 2, argv, cb, arg);
}

int rd_store_move_report(rd_store_t *st, rd_store_queue_t source, long long task,
                         const char *runner, long long moved, long long lease_ms,
                         const char *end, const char *reason, rd_store_strings_cb cb, void *arg)
{
    char t[24], m[24], l[24];
    rd_str_t argv[] = { num(t, task), text(runner), num(m, moved), num(l, lease_ms), text(end),
                        text(reason) };
    return rd_store_send_move(st, RD_MOVE_FN_REPORT, source, 6, argv, cb, arg);
}

int rd_store_move_cancel(rd_store_t *st, rd_store_queue_t source, long long task,
                         rd_store_strings_cb cb, void *arg)
{
    char t[24];
    rd_str_t argv[] = { num(t, task) };
    return rd_store_send_move(st, RD_MOVE_FN_CANCEL, source, 1, argv, cb, arg);
}

int rd_store_move_list(rd_store_t *st, rd_store_queue_t source, int max, rd_store_strings_cb cb,
                       void *arg)
{
    char m[24];
    rd_str_t argv[] = { num(m, max) };
    return rd_store_send_move(st, RD_MOVE_FN_LIST, source, 1, argv, cb, arg);
}

int rd_store_move_watch(rd_store_t *st, rd_store_queue_t source, long long at_ms,
                        long long expect_ms, rd_store_strings_cb cb, void *arg)
{
    char a[24], e[24];
    rd_str_t argv[] = { { source.name, source.len }, at_ms < 0 ? text("") : num(a, at_ms),
                        expect_ms < 0 ? text("") : num(e, expect_ms) };
    rd_store_queue_t none = { .name = NULL, .len = 0 };
    return rd_store_send_move(st, RD_MOVE_FN_WATCH, none, 3, argv, cb, arg);
}

int rd_store_move_due(rd_store_t *st, int count, rd_store_strings_cb cb, void *arg)
{
    char c[24];
    rd_str_t argv[] = { num(c, count) };
    rd_store_queue_t none = { .name = NULL, .len = 0 };
    return rd_store_send_move(st, RD_MOVE_FN_DUE, none, 1, argv, cb, arg);
}
