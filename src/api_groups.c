/* api_groups.c - GET /queues/{q}/groups: a page of the queue's fairness
 * groups with their counts (docs/reference.md "Fairness groups"). The
 * cursor is the hex of the last group of the page, so that any group name
 * travels in a query string as is and users treat it as opaque. */
#include "retryd/api_call.h"

#include "retryd/buf.h"
#include "retryd/hex.h"
#include "retryd/shard_list.h"

static void on_groups(const rd_store_groups_t *res, void *arg)
{
    rd_call_t *c = arg;
    if (rd_api_respond_store_failure(c, &res->head)) return;
    rd_jsonw_t w;
    rd_api_begin_json(c, &w);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "groups");
    rd_jsonw_array_open(&w);
    for (size_t i = 0; i < res->count; i++) {
        const rd_store_group_t *g = &res->groups[i];
        rd_jsonw_object_open(&w);
        rd_jsonw_key(&w, "group");
        rd_jsonw_stringn(&w, g->name.ptr, g->name.len);
        rd_jsonw_key(&w, "pending");
        rd_jsonw_int(&w, g->pending);
        rd_jsonw_key(&w, "processing");
        rd_jsonw_int(&w, g->processing);
        rd_jsonw_object_close(&w);
    }
    rd_jsonw_array_close(&w);
    rd_jsonw_key(&w, "next_cursor");
    if (res->next_cursor.len > 0) {
        rd_buf_t hex = RD_BUF_INIT;
        rd_hex_encode(res->next_cursor.ptr, res->next_cursor.len, &hex);
        rd_jsonw_plain_string(&w, hex.data, hex.len);
        rd_buf_free(&hex);
    } else {
        rd_jsonw_null(&w);
    }
    rd_jsonw_object_close(&w);
    rd_api_respond_written(c, 200, NULL);
}

void rd_api_handle_groups(rd_call_t *c)
{
    rd_groups_req_t g;
    rd_field_errors_t errs = { .count = 0 };
    if (rd_request_groups(c->req->query, c->req->query_len, &g, &errs) != RD_REQ_OK) {
        rd_api_respond_problem(c, RD_PROBLEM_VALIDATION_FAILED, "The query has invalid fields.",
                               &errs, NULL);
        return;
    }
    rd_api_started(c, rd_shard_groups(c->api->store, rd_api_queue_of(c), g.cursor, g.cursor_len,
                                      g.limit, on_groups, c));
}
