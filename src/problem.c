/* problem.c - RFC 9457 problem details for every HTTP error. */
#include "retryd/problem.h"

#include <stdio.h>

#include "retryd/alloc.h"
#include "retryd/json.h"
#include "retryd/utf8.h"

static const struct {
    int status;
    const char *slug;
    const char *title;
} problems[RD_PROBLEM_COUNT] = {
    [RD_PROBLEM_MALFORMED_REQUEST] = { 400, "malformed-request", "Malformed Request" },
    [RD_PROBLEM_UNAUTHORIZED] = { 401, "unauthorized", "Unauthorized" },
    [RD_PROBLEM_FORBIDDEN] = { 403, "forbidden", "Forbidden" },
    [RD_PROBLEM_NOT_FOUND] = { 404, "not-found", "Not Found" },
    [RD_PROBLEM_METHOD_NOT_ALLOWED] = { 405, "method-not-allowed", "Method Not Allowed" },
    [RD_PROBLEM_INVALID_STATE] = { 409, "invalid-state", "Invalid State" },
    [RD_PROBLEM_LEASE_MISMATCH] = { 409, "lease-mismatch", "Lease Mismatch" },
    [RD_PROBLEM_PAYLOAD_TOO_LARGE] = { 413, "payload-too-large", "Payload Too Large" },
    [RD_PROBLEM_EXPECTATION_FAILED] = { 417, "expectation-failed", "Expectation Failed" },
    [RD_PROBLEM_HEADERS_TOO_LARGE] = { 431, "request-header-too-large",
                                       "Request Header Fields Too Large" },
    [RD_PROBLEM_VALIDATION_FAILED] = { 422, "validation-failed", "Validation Failed" },
    [RD_PROBLEM_INTERNAL] = { 500, "internal-error", "Internal Server Error" },
    [RD_PROBLEM_NOT_IMPLEMENTED] = { 501, "not-implemented", "Not Implemented" },
    [RD_PROBLEM_BACKEND_UNAVAILABLE] = { 503, "backend-unavailable", "Backend Unavailable" },
    [RD_PROBLEM_OUTCOME_UNKNOWN] = { 503, "outcome-unknown", "Outcome Unknown" },
};

void rd_field_errors_add(rd_field_errors_t *errs, const char *field, const char *code,
                         const char *message)
{
    if (errs->count == RD_MAX_FIELD_ERRORS) return;
    errs->items[errs->count++] = (rd_field_error_t){ field, code, message };
}

int rd_problem_status(rd_problem_t p)
{
    return problems[p].status;
}

const char *rd_problem_slug(rd_problem_t p)
{
    return problems[p].slug;
}

const char *rd_problem_title(rd_problem_t p)
{
    return problems[p].title;
}

char *rd_problem_body(rd_problem_t p, const char *detail, const char *instance,
                      size_t instance_len, const rd_field_errors_t *errs, size_t *len)
{
    char type[64];
    snprintf(type, sizeof type, "/problems/%s", problems[p].slug);
    rd_json_t *doc = rd_json_new_object();
    rd_json_set_string(doc, "type", type);
    rd_json_set_string(doc, "title", problems[p].title);
    rd_json_set_int(doc, "status", problems[p].status);
    rd_json_set_string(doc, "detail", detail ? detail : problems[p].title);
    if (instance == NULL) instance_len = 0;
    instance_len = rd_utf8_cut(instance, instance_len, RD_PROBLEM_INSTANCE_MAX);
    rd_json_set_stringn(doc, "instance", instance ? instance : "", instance_len);
    if (errs && errs->count > 0) {
        rd_json_t *list = rd_json_new_array();
        for (size_t i = 0; i < errs->count; i++) {
            rd_json_t *e = rd_json_new_object();
            rd_json_set_string(e, "field", errs->items[i].field);
            rd_json_set_string(e, "code", errs->items[i].code);
            rd_json_set_string(e, "message", errs->items[i].message);
            rd_json_append(list, e);
        }
        rd_json_set(doc, "errors", list);
    }
    char *text = rd_json_print(doc, len);
    rd_json_free(doc);
    return text;
}
