/* shard_list.c - a queue's listings page by page across its shards
 * (include/retryd/shard_list.h, docs/sharding.md "Every API over all
 * shards"). A page reads one shard; its cursor is "s<k>.<that shard's
 * cursor>". A page whose shard has nothing more goes on to the next shard
 * at once, at most PAGE_CALLS shards a page, so an empty shard does not cost
 * the client a round trip. A message page's total is the sum of every
 * shard's: the other shards are counted first (list with limit 0), one call
 * after the other, so that the page is answered from its own reply without
 * a copy. */
#include "retryd/shard_list.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/shard_view.h"
#include "retryd/shards.h"

enum { PAGE_CALLS = 4 };

typedef enum { OF_MESSAGES, OF_GROUPS } kind_t;

typedef struct job {
    rd_store_t *st;
    kind_t kind;
    char *queue;
    size_t len;
    char *status, *needle;          /* messages: the filters (owned) */
    long long since_ms, until_ms;
    int limit;
    char *cursor;                   /* as the client sent it (owned) */
    size_t cursor_len;
    const char *rest;               /* the shard's own cursor within it */
    size_t rest_len;
    rd_shard_view_t view;           /* the view the job started from (n 1: none): every
                                       call of a page carries its rev, so a layout
                                       changed meanwhile is refused ({"reshard"}) and the
                                       page starts again, never pages a mix */
    int n;                          /* its shards */
    int shard;                      /* the page's shard */
    int counting;                   /* the next shard to count; n: all counted */
    int calls;                      /* page calls so far */
    bool reread;                    /* the view was read again after a {"reshard"} */
    long long totals[RD_SHARDS_MAX];
    rd_store_list_cb list_cb;
    rd_store_groups_cb groups_cb;
    void *arg;
} job_t;

static void job_free(job_t *j)
{
    rd_free(j->status);
    rd_free(j->needle);
    rd_free(j->cursor);
    rd_free(j->queue);
    rd_free(j);
}

static void fail(job_t *j, rd_store_status_t status)
{
    rd_store_head_t head = { .status = status };
    if (j->kind == OF_MESSAGES) {
        rd_store_list_t res = { .head = head };
        j->list_cb(&res, j->arg);
    } else {
        rd_store_groups_t res = { .head = head };
        j->groups_cb(&res, j->arg);
    }
    job_free(j);
}

/* q at the shard by the job's view; false past its shards. */
static bool shard_of(job_t *j, int shard, rd_store_queue_t *out)
{
    rd_store_queue_t q = { .name = j->queue, .len = j->len };
    if (shard > 0 && shard >= j->view.n) return false;
    *out = rd_shard_view_at(j->view.n > 1 ? &j->view : NULL, q, shard);
    return true;
}

static int list_at(job_t *j, int shard, int limit, const char *cursor, rd_store_list_cb cb)
{
    rd_store_queue_t q;
    if (!shard_of(j, shard, &q)) return -1;
    return rd_store_list(j->st, q, j->status, limit, cursor, limit ? j->needle : NULL,
                         limit ? j->since_ms : -1, limit ? j->until_ms : -1, cb, j);
}

static void on_listed(const rd_store_list_t *res, void *arg);
static void on_counted(const rd_store_list_t *res, void *arg);
static void on_groups(const rd_store_groups_t *res, void *arg);

static int ask_page(job_t *j, const char *cursor, size_t cursor_len)
{
    j->calls++;
    if (j->kind == OF_GROUPS) {
        rd_store_queue_t q;
        if (!shard_of(j, j->shard, &q)) return -1;
        return rd_store_groups(j->st, q, cursor, cursor_len, j->limit, on_groups, j);
    }
    /* A NUL-terminated copy: the shard's cursor is the tail of the client's. */
    char own[RD_SHARD_LIST_CURSOR_MAX];
    size_t n = cursor_len < sizeof own - 1 ? cursor_len : sizeof own - 1;
    memcpy(own, cursor, n);
    own[n] = '\0';
    return list_at(j, j->shard, j->limit, own, on_listed);
}

/* Counts the next shard not yet counted, or asks for the page once all are. */
static int go_on(job_t *j)
{
    if (j->kind == OF_MESSAGES && (j->n > 1 || j->shard >= j->n)) {
        while (j->counting < j->n && j->counting == j->shard) j->counting++;
        if (j->counting < j->n) return list_at(j, j->counting, 0, "", on_counted);
    }
    if (j->shard >= j->n) {   /* a cursor past the last shard (the queue was lowered) */
        if (j->kind == OF_MESSAGES) {
            rd_store_list_t end = { .head = { .status = RD_STORE_OK } };
            for (int i = 0; i < j->n; i++) end.total += j->totals[i];
            j->list_cb(&end, j->arg);
        } else {
            rd_store_groups_t end = { .head = { .status = RD_STORE_OK } };
            j->groups_cb(&end, j->arg);
        }
        job_free(j);
        return 0;
    }
    return ask_page(j, j->rest, j->rest_len);
}

/* From the top: the view as it is now, the client's cursor read again. */
static int start(job_t *j)
{
    rd_store_queue_t q = { .name = j->queue, .len = j->len };
    rd_shard_view_t *v = rd_store_view(j->st, q);
    j->view = v ? *v : (rd_shard_view_t){ .n = 1 };
    j->n = j->view.n;
    j->shard = 0;
    j->counting = 0;
    j->calls = 0;
    j->rest = j->cursor;
    j->rest_len = j->cursor_len;
    memset(j->totals, 0, sizeof j->totals);
    /* A message cursor is read the same on one shard: "s<k>." past the count
     * (the queue was lowered) ends there too. A group cursor of a queue of
     * one shard is a group's name, whatever it starts with. */
    if ((j->n > 1 || j->kind == OF_MESSAGES) && j->cursor_len > 0 &&
        rd_shards_cursor_parse(j->cursor, j->cursor_len, &j->shard, &j->rest, &j->rest_len) != 0)
        return 1;   /* "s<digits>." naming no shard */
    return go_on(j);
}

static void on_view_read(const rd_store_head_t *res, void *arg)
{
    job_t *j = arg;
    if (res->status != RD_STORE_OK) {
        fail(j, res->status);
        return;
    }
    int rc = start(j);
    if (rc != 0) fail(j, rc > 0 ? RD_STORE_BAD_CURSOR : RD_STORE_UNAVAILABLE);
}

/* A call refused for the view: read it again once, then from the top; a
 * second refusal is the answer (the API's 503). True when handled. */
static bool reshard(job_t *j, const rd_store_head_t *head)
{
    if (head->status != RD_STORE_RESHARD) return false;
    if (j->reread) {
        fail(j, RD_STORE_RESHARD);
        return true;
    }
    j->reread = true;
    rd_store_queue_t q = { .name = j->queue, .len = j->len };
    if (rd_store_read_view(j->st, q, on_view_read, j) != 0) fail(j, RD_STORE_UNAVAILABLE);
    return true;
}

static void on_counted(const rd_store_list_t *res, void *arg)
{
    job_t *j = arg;
    if (reshard(j, &res->head)) return;
    if (res->head.status != RD_STORE_OK) {
        fail(j, res->head.status);
        return;
    }
    j->totals[j->counting++] = res->total;
    if (go_on(j) != 0) fail(j, RD_STORE_UNAVAILABLE);
}

/* The cursor of the page after one of shard k that ended at `next`. */
static void next_cursor(job_t *j, rd_str_t next, rd_buf_t *out)
{
    if (next.len > 0) rd_shards_cursor_format(out, j->shard, next.ptr, next.len);
    else if (j->shard + 1 < j->n) rd_shards_cursor_format(out, j->shard + 1, "", 0);
}

/* A shard with nothing more whose page is empty: the next shard, at once. */
static bool page_on(job_t *j, size_t count, rd_str_t next)
{
    if (count > 0 || next.len > 0 || j->shard + 1 >= j->n || j->calls >= PAGE_CALLS) return false;
    j->shard++;
    if (ask_page(j, "", 0) != 0) fail(j, RD_STORE_UNAVAILABLE);
    return true;
}

static void on_listed(const rd_store_list_t *res, void *arg)
{
    job_t *j = arg;
    if (reshard(j, &res->head)) return;
    if (res->head.status != RD_STORE_OK || j->n == 1) {
        j->list_cb(res, j->arg);
        job_free(j);
        return;
    }
    j->totals[j->shard] = res->total;
    if (page_on(j, res->count, res->next_cursor)) return;
    rd_store_list_t page = *res;
    page.total = 0;
    for (int i = 0; i < j->n; i++) page.total += j->totals[i];
    rd_buf_t cursor = RD_BUF_INIT;
    next_cursor(j, res->next_cursor, &cursor);
    page.next_cursor = (rd_str_t){ cursor.data, cursor.len };
    j->list_cb(&page, j->arg);
    rd_buf_free(&cursor);
    job_free(j);
}

static void on_groups(const rd_store_groups_t *res, void *arg)
{
    job_t *j = arg;
    if (reshard(j, &res->head)) return;
    if (res->head.status != RD_STORE_OK || j->n == 1) {
        j->groups_cb(res, j->arg);
        job_free(j);
        return;
    }
    if (page_on(j, res->count, res->next_cursor)) return;
    rd_store_groups_t page = *res;
    rd_buf_t cursor = RD_BUF_INIT;
    next_cursor(j, res->next_cursor, &cursor);
    page.next_cursor = (rd_str_t){ cursor.data, cursor.len };
    j->groups_cb(&page, j->arg);
    rd_buf_free(&cursor);
    job_free(j);
}

static job_t *job_new(rd_store_t *st, kind_t kind, rd_store_queue_t q, const char *cursor,
                      size_t cursor_len, int limit, void *arg)
{
    job_t *j = rd_calloc(1, sizeof *j);
    j->st = st;
    j->kind = kind;
    j->queue = rd_strndup(q.name, q.len);
    j->len = q.len;
    j->limit = limit;
    j->cursor = rd_strndup(cursor ? cursor : "", cursor ? cursor_len : 0);
    j->cursor_len = cursor ? cursor_len : 0;
    j->arg = arg;
    return j;
}

/* A start that could not send is the caller's -1; a bad cursor is answered. */
static int begin(job_t *j)
{
    int rc = start(j);
    if (rc > 0) {
        fail(j, RD_STORE_BAD_CURSOR);
        return 0;
    }
    if (rc < 0) job_free(j);
    return rc;
}

int rd_shard_list(rd_store_t *st, rd_store_queue_t q, const rd_shard_list_args_t *a,
                  rd_store_list_cb cb, void *arg)
{
    job_t *j = job_new(st, OF_MESSAGES, q, a->cursor, a->cursor ? strlen(a->cursor) : 0,
                       a->limit, arg);
    j->status = a->status ? rd_strdup(a->status) : NULL;
    j->needle = a->error_contains ? rd_strdup(a->error_contains) : NULL;
    j->since_ms = a->since_ms;
    j->until_ms = a->until_ms;
    j->list_cb = cb;
    return begin(j);
}

int rd_shard_groups(rd_store_t *st, rd_store_queue_t q, const char *cursor, size_t cursor_len,
                    int limit, rd_store_groups_cb cb, void *arg)
{
    job_t *j = job_new(st, OF_GROUPS, q, cursor, cursor_len, limit, arg);
    j->groups_cb = cb;
    return begin(j);
}
