/* request_policy.c - the body of PUT and PATCH /queues/{q}/policy: parsing
 * and validating it into a rd_policy_t (docs/reference.md "Queue policy and
 * flow control"). The other bodies and queries are request.c's. */
#include "retryd/request.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/config.h"
#include "retryd/shards.h"
#include "retryd/utf8.h"

/* ---------------------------------------------------------------- PUT /queues/{q}/policy */

/* An optional integer member in [min, max] into *out (absent or null: left). */
static void int_member(const rd_json_t *obj, const char *name, const char *field, long long min,
                       long long max, long long *out, const char *message,
                       rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL || rd_json_is_null(v)) return;
    long long n;
    if (!rd_json_integer(v, &n) || n < min || n > max) {
        rd_field_errors_add(errs, field, "invalid", message);
        return;
    }
    *out = n;
}

/* A retention: integer seconds or a duration string ("30d"), 0 keeps forever. */
static void ttl_member(const rd_json_t *obj, const char *name, long long *out, const char *message,
                       rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL || rd_json_is_null(v)) return;
    long long s = -1;
    if (rd_json_is_string(v)) {
        long long ms = rd_parse_duration_ms(rd_json_string(v));
        if (ms >= 0 && ms % 1000 == 0) s = ms / 1000;
    } else if (!rd_json_integer(v, &s)) {
        s = -1;
    }
    if (s < 0 || s > RD_POLICY_TTL_SECONDS_MAX) {
        rd_field_errors_add(errs, name, "invalid", message);
        return;
    }
    *out = s;
}

/* A member that must be an object (or absent/null): returns it, or NULL. */
static rd_json_t *object_member(const rd_json_t *obj, const char *name, rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL || rd_json_is_null(v)) return NULL;
    if (!rd_json_is_object(v)) {
        rd_field_errors_add(errs, name, "invalid",
                            strcmp(name, "backoff") == 0
                            ? "backoff must be an object {base_seconds?, max_seconds?, jitter?}."
                            : strcmp(name, "rate_limit") == 0
                            ? "rate_limit must be null or an object {per_second, burst}."
                            : "group_rate_limit must be null or an object {per_second, burst}.");
        return NULL;
    }
    return v;
}

/* A token bucket, rate_limit or group_rate_limit: null, or {per_second
 * (0.001-100000), burst (1-100000)}, both required. Error fields and messages
 * are static strings (field errors keep them by pointer). */
static void rate_member(const rd_json_t *doc, bool group, double *per_second, long long *burst,
                        rd_field_errors_t *errs)
{
    static const char *const text[2][5] = {
        { "rate_limit.per_second", "rate_limit.burst", "rate_limit.per_second is required.",
          "rate_limit.per_second must be a number between 0.001 and 100000.",
          "rate_limit.burst must be an integer between 1 and 100000." },
        { "group_rate_limit.per_second", "group_rate_limit.burst",
          "group_rate_limit.per_second is required.",
          "group_rate_limit.per_second must be a number between 0.001 and 100000.",
          "group_rate_limit.burst must be an integer between 1 and 100000." },
    };
    static const char *const burst_required[2] = { "rate_limit.burst is required.",
                                                   "group_rate_limit.burst is required." };
    const char *const *t = text[group];
    rd_json_t *r = object_member(doc, group ? "group_rate_limit" : "rate_limit", errs);
    if (r == NULL) return;
    rd_json_t *ps = rd_json_get(r, "per_second");
    double v;
    if (ps == NULL || rd_json_is_null(ps))
        rd_field_errors_add(errs, t[0], "required", t[2]);
    else if (!rd_json_number(ps, &v) || v < 0.001 || v > 100000)
        rd_field_errors_add(errs, t[0], "invalid", t[3]);
    else
        *per_second = v;
    rd_json_t *bu = rd_json_get(r, "burst");
    if (bu == NULL || rd_json_is_null(bu))
        rd_field_errors_add(errs, t[1], "required", burst_required[group]);
    else
        int_member(r, "burst", t[1], 1, 100000, burst, t[4], errs);
}

/* Error names of rule fields ("dead_letter_rules[3].max_times"), formatted
 * into a static table, one per error slot, which holds until the next request
 * is parsed (the 422 is written before that), as request.c's item names. */
static void rule_error(rd_field_errors_t *errs, size_t i, const char *name, const char *code,
                       const char *message)
{
    static char names[RD_MAX_FIELD_ERRORS][64];
    if (errs->count == RD_MAX_FIELD_ERRORS) return;
    char *slot = names[errs->count];
    if (name)
        snprintf(slot, sizeof names[0], "dead_letter_rules[%zu].%s", i, name);
    else
        snprintf(slot, sizeof names[0], "dead_letter_rules[%zu]", i);
    rd_field_errors_add(errs, slot, code, message);
}

/* A rule's optional text (error_contains / error_prefix): 1-255 bytes of UTF-8. */
static const char *rule_text(const rd_json_t *r, size_t i, const char *name,
                             rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(r, name);
    if (v == NULL || rd_json_is_null(v)) return NULL;
    const char *s = rd_json_string(v);
    size_t len = s ? strlen(s) : 0;
    if (s == NULL || len < 1 || len > RD_POLICY_RULE_TEXT_MAX || !rd_utf8_valid(s, len)) {
        rule_error(errs, i, name, "invalid",
                   "must be a UTF-8 string of 1 to 255 bytes (matched as plain bytes).");
        return NULL;
    }
    return s;
}

static const char *const RULE_KNOWN[] = { "error_contains", "error_prefix", "action",
                                          "delay_seconds", "max_times" };

/* dead_letter_rules: checked rule by rule, and written canonical (every
 * field in one order, the defaults of a retry rule filled in) into
 * out->rules_owned. An empty list is no rules. */
static void rules_member(const rd_json_t *doc, rd_policy_t *out, rd_field_errors_t *errs)
{
    rd_json_t *list = rd_json_get(doc, "dead_letter_rules");
    if (list == NULL || rd_json_is_null(list)) return;
    if (!rd_json_is_array(list)) {
        rd_field_errors_add(errs, "dead_letter_rules", "invalid",
                            "dead_letter_rules must be an array of rules.");
        return;
    }
    size_t n = rd_json_array_size(list);
    if (n > RD_POLICY_RULES_MAX) {
        rd_field_errors_add(errs, "dead_letter_rules", "invalid",
                            "dead_letter_rules holds at most 20 rules.");
        return;
    }
    if (n == 0) return;
    size_t before = errs->count;
    rd_buf_t text = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &text);
    rd_jsonw_array_open(&w);
    for (size_t i = 0; i < n; i++) {
        const rd_json_t *r = rd_json_array_at(list, i);
        if (!rd_json_is_object(r)) {
            rule_error(errs, i, NULL, "invalid",
                       "a rule is an object {error_contains?, error_prefix?, action, "
                       "delay_seconds?, max_times?}.");
            continue;
        }
        for (size_t k = 0; k < rd_json_object_size(r); k++) {
            const char *name = rd_json_object_key_at(r, k);
            bool known = false;
            for (size_t j = 0; !known && j < sizeof RULE_KNOWN / sizeof RULE_KNOWN[0]; j++)
                known = strcmp(name, RULE_KNOWN[j]) == 0;
            if (!known) {
                /* Only known names are formatted into the error's field. */
                rule_error(errs, i, NULL, "invalid",
                           "a rule has only error_contains, error_prefix, action, "
                           "delay_seconds and max_times.");
                break;
            }
        }
        const char *contains = rule_text(r, i, "error_contains", errs);
        const char *prefix = rule_text(r, i, "error_prefix", errs);
        rd_json_t *ec = rd_json_get(r, "error_contains"), *ep = rd_json_get(r, "error_prefix");
        if ((ec == NULL || rd_json_is_null(ec)) && (ep == NULL || rd_json_is_null(ep)))
            rule_error(errs, i, "error_contains", "required",
                       "a rule needs error_contains or error_prefix (both must hold when both "
                       "are given).");
        rd_json_t *a = rd_json_get(r, "action");
        const char *action = a ? rd_json_string(a) : NULL;
        bool retry = action && strcmp(action, "retry") == 0;
        if (a == NULL || rd_json_is_null(a))
            rule_error(errs, i, "action", "required", "action is required: \"retry\" or \"dead\".");
        else if (!retry && (action == NULL || strcmp(action, "dead") != 0))
            rule_error(errs, i, "action", "invalid", "action must be \"retry\" or \"dead\".");
        long long delay = 0, times = 1;
        static const struct {
            const char *name;
            long long min, max;
            const char *message;
        } nums[] = {
            { "delay_seconds", 0, 86400, "delay_seconds must be an integer between 0 and 86400." },
            { "max_times", 1, 100, "max_times must be an integer between 1 and 100." },
        };
        for (size_t j = 0; j < 2; j++) {
            rd_json_t *v = rd_json_get(r, nums[j].name);
            if (v == NULL || rd_json_is_null(v)) continue;
            long long x;
            if (action && !retry) {
                rule_error(errs, i, nums[j].name, "invalid", "only a \"retry\" rule has it.");
            } else if (!rd_json_integer(v, &x) || x < nums[j].min || x > nums[j].max) {
                rule_error(errs, i, nums[j].name, "invalid", nums[j].message);
            } else {
                *(j == 0 ? &delay : &times) = x;
            }
        }
        rd_jsonw_object_open(&w);
        if (contains) {
            rd_jsonw_key(&w, "error_contains");
            rd_jsonw_string(&w, contains);
        }
        if (prefix) {
            rd_jsonw_key(&w, "error_prefix");
            rd_jsonw_string(&w, prefix);
        }
        rd_jsonw_key(&w, "action");
        rd_jsonw_string(&w, retry ? "retry" : "dead");
        if (retry) {
            rd_jsonw_key(&w, "delay_seconds");
            rd_jsonw_int(&w, delay);
            rd_jsonw_key(&w, "max_times");
            rd_jsonw_int(&w, times);
        }
        rd_jsonw_object_close(&w);
    }
    rd_jsonw_array_close(&w);
    if (errs->count != before) {
        rd_buf_free(&text);
        return;
    }
    out->rules_owned = text.data;
    out->rules = text.data;
    out->rules_len = text.len;
}

/* alert_url: a string rd_policy_alert_url_valid takes, or absent/null. A
 * document with an escaped U+0000 (has_nul) is read again with it as U+0001,
 * which the check refuses (cJSON would cut the string short there). */
static void alert_url_member(const rd_json_t *doc, const char *body, size_t len, bool has_nul,
                             rd_policy_t *out, rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(doc, "alert_url");
    if (v == NULL || rd_json_is_null(v)) return;
    rd_json_t *marked = has_nul ? rd_json_parse_nul_marked(body, len) : NULL;
    if (marked) v = rd_json_get(marked, "alert_url");
    const char *s = v ? rd_json_string(v) : NULL;
    size_t n = s ? strlen(s) : 0;
    if (!rd_policy_alert_url_valid(s, n)) {
        rd_field_errors_add(errs, "alert_url", "invalid",
                            "alert_url must be null or an absolute http:// or https:// URL of 1 to "
                            "2048 bytes of UTF-8, without spaces or control characters.");
    } else {
        out->alert_url_owned = rd_strndup(s, n);
        out->alert_url = out->alert_url_owned;
        out->alert_url_len = n;
    }
    rd_json_free(marked);
}

/* dead_letter_queue: a queue name (as the path's, field dead_letter_queue), or
 * absent/null. That it is not the queue itself, and leads into no cycle, is
 * checked by the caller (api.c, dlq_link). */
static const char *const dlq_name_why[] = {
    NULL, "dead_letter_queue must be null or a queue name of 1 to "
          RD_LIMIT_STR(RD_QUEUE_NAME_MAX) " bytes.",
    "dead_letter_queue must be valid UTF-8.",
    "dead_letter_queue must not contain control characters.",
    "dead_letter_queue must not be \".\" or \"..\"." };

static void dead_letter_queue_member(const rd_json_t *doc, const char *body, size_t len,
                                     bool has_nul, rd_policy_t *out, rd_field_errors_t *errs)
{
    rd_json_t *marked = has_nul ? rd_json_parse_nul_marked(body, len) : NULL;
    const char *name;
    int why = rd_request_queue_name_member(doc, marked, "dead_letter_queue", &name);
    if (why != RD_NAME_OK) {
        rd_field_errors_add(errs, "dead_letter_queue", "invalid", dlq_name_why[why]);
    } else if (name) {
        out->dead_letter_queue_owned = rd_strdup(name);
        out->dead_letter_queue = out->dead_letter_queue_owned;
        out->dead_letter_queue_len = strlen(name);
    }
    rd_json_free(marked);
}

/* A boolean member into *out as 0 or 1 (absent or null: left). */
static void bool_member(const rd_json_t *doc, const char *name, int *out, const char *why,
                        rd_field_errors_t *errs)
{
    rd_json_t *v = rd_json_get(doc, name);
    if (v == NULL || rd_json_is_null(v)) return;
    if (rd_json_is_bool(v)) *out = rd_json_bool(v) ? 1 : 0;
    else rd_field_errors_add(errs, name, "invalid", why);
}

/* The SQS endpoint's fields (docs/sqs.md section 3); any face may set them. */
static void sqs_members(const rd_json_t *doc, rd_policy_t *out, rd_field_errors_t *errs)
{
    rd_json_t *le = rd_json_get(doc, "lease_expiry");
    if (le && !rd_json_is_null(le)) {
        const char *s = rd_json_string(le);
        if (s && (strcmp(s, "backoff") == 0 || strcmp(s, "redeliver") == 0))
            snprintf(out->lease_expiry, sizeof out->lease_expiry, "%s", s);
        else
            rd_field_errors_add(errs, "lease_expiry", "invalid",
                                "lease_expiry must be \"backoff\" or \"redeliver\".");
    }
    int_member(doc, "delay_seconds", "delay_seconds", 0, RD_POLICY_DELAY_SECONDS_MAX,
               &out->delay_seconds, "delay_seconds must be an integer between 0 and "
               RD_LIMIT_STR(RD_POLICY_DELAY_SECONDS_MAX) ".", errs);
    int_member(doc, "max_payload_bytes", "max_payload_bytes", RD_POLICY_PAYLOAD_BYTES_MIN,
               RD_POLICY_PAYLOAD_BYTES_MAX, &out->max_payload_bytes,
               "max_payload_bytes must be null or an integer between "
               RD_LIMIT_STR(RD_POLICY_PAYLOAD_BYTES_MIN) " and "
               RD_LIMIT_STR(RD_POLICY_PAYLOAD_BYTES_MAX) ".", errs);
    int_member(doc, "wait_seconds", "wait_seconds", 0, RD_POLICY_WAIT_SECONDS_MAX,
               &out->wait_seconds, "wait_seconds must be an integer between 0 and "
               RD_LIMIT_STR(RD_POLICY_WAIT_SECONDS_MAX) ".", errs);
    bool_member(doc, "sqs", &out->sqs, "sqs must be a boolean.", errs);
    bool_member(doc, "content_based_dedup", &out->content_based_dedup,
                "content_based_dedup must be a boolean.", errs);
}

/* created_at, updated_at and shards_settling are read-only: a body that
 * carries them (a GET's answer sent back) is taken, and they are ignored, as
 * queue and paused. */
static const char *const KNOWN[] = { "max_retries", "backoff", "lease_seconds", "dead_ttl",
                                     "succeeded_ttl", "max_in_flight", "rate_limit", "paused",
                                     "queue", "dead_letter_rules", "alert_url", "message_ttl",
                                     "on_expiry", "dead_letter_queue", "group_max_in_flight",
                                     "group_rate_limit", "fifo_groups", "lease_expiry",
                                     "delay_seconds", "max_payload_bytes", "wait_seconds", "sqs",
                                     "content_based_dedup", "created_at", "updated_at",
                                     "shards", "shards_settling" };

rd_req_result_t rd_request_policy(const char *body, size_t len, rd_policy_t *out,
                                  rd_field_errors_t *errs)
{
    rd_policy_init(out);
    if (body == NULL || len == 0) return RD_REQ_MALFORMED;
    bool has_nul = false;
    rd_json_t *doc = rd_json_parse(body, len, &has_nul);
    if (doc == NULL || !rd_json_is_object(doc)) {
        rd_json_free(doc);
        return RD_REQ_MALFORMED;
    }
    const char *retries_why = "max_retries must be an integer between 1 and "
                              RD_LIMIT_STR(RD_POLICY_MAX_RETRIES_MAX) " or \"unlimited\".";
    rd_json_t *mr = rd_json_get(doc, "max_retries");
    const char *mr_text = mr ? rd_json_string(mr) : NULL;
    if (mr_text && strcmp(mr_text, "unlimited") == 0) out->max_retries = RD_POLICY_UNLIMITED;
    else if (mr_text) rd_field_errors_add(errs, "max_retries", "invalid", retries_why);
    else int_member(doc, "max_retries", "max_retries", 1, RD_POLICY_MAX_RETRIES_MAX,
                    &out->max_retries, retries_why, errs);
    rd_json_t *b = object_member(doc, "backoff", errs);
    if (b) {
        int_member(b, "base_seconds", "backoff.base_seconds", 1, 3600, &out->base_seconds,
                   "backoff.base_seconds must be an integer between 1 and 3600.", errs);
        int_member(b, "max_seconds", "backoff.max_seconds", 1, 86400, &out->max_seconds,
                   "backoff.max_seconds must be an integer between 1 and 86400.", errs);
        rd_json_t *j = rd_json_get(b, "jitter");
        if (j && !rd_json_is_null(j)) {
            const char *s = rd_json_string(j);
            if (s && (strcmp(s, "none") == 0 || strcmp(s, "full") == 0 || strcmp(s, "equal") == 0))
                snprintf(out->jitter, sizeof out->jitter, "%s", s);
            else
                rd_field_errors_add(errs, "backoff.jitter", "invalid",
                                    "backoff.jitter must be \"none\", \"full\" or \"equal\".");
        }
    }
    int_member(doc, "lease_seconds", "lease_seconds", 1, RD_LEASE_SECONDS_MAX, &out->lease_seconds,
               "lease_seconds must be an integer between 1 and " RD_LIMIT_STR(RD_LEASE_SECONDS_MAX) ".",
               errs);
    ttl_member(doc, "dead_ttl", &out->dead_ttl_s,
               "dead_ttl must be whole seconds (0 keeps forever) or a duration like \"30d\", at most 3650d.",
               errs);
    ttl_member(doc, "succeeded_ttl", &out->succeeded_ttl_s,
               "succeeded_ttl must be whole seconds (0 keeps forever) or a duration like \"1h\", at most 3650d.",
               errs);
    int_member(doc, "max_in_flight", "max_in_flight", 0, RD_POLICY_MAX_IN_FLIGHT_MAX,
               &out->max_in_flight,
               "max_in_flight must be an integer between 0 (no cap) and 1000000.", errs);
    rate_member(doc, false, &out->per_second, &out->burst, errs);
    rules_member(doc, out, errs);
    alert_url_member(doc, body, len, has_nul, out, errs);
    rd_json_t *mt = rd_json_get(doc, "message_ttl");
    if (mt && !rd_json_is_null(mt)) {
        long long s = -1;
        ttl_member(doc, "message_ttl", &s,
                   "message_ttl must be whole seconds (0: no expiry) or a duration like \"1h\", "
                   "at most 30d.", errs);
        if (s > RD_POLICY_MESSAGE_TTL_MAX)
            rd_field_errors_add(errs, "message_ttl", "invalid",
                                "message_ttl must be whole seconds (0: no expiry) or a duration "
                                "like \"1h\", at most 30d.");
        else if (s >= 0)
            out->message_ttl_s = s;
    }
    rd_json_t *oe = rd_json_get(doc, "on_expiry");
    if (oe && !rd_json_is_null(oe)) {
        const char *s = rd_json_string(oe);
        if (s && (strcmp(s, "dead") == 0 || strcmp(s, "delete") == 0))
            snprintf(out->on_expiry, sizeof out->on_expiry, "%s", s);
        else
            rd_field_errors_add(errs, "on_expiry", "invalid",
                                "on_expiry must be \"dead\" or \"delete\".");
    }
    dead_letter_queue_member(doc, body, len, has_nul, out, errs);
    /* Fairness groups (docs/reference.md "Fairness groups"). */
    int_member(doc, "group_max_in_flight", "group_max_in_flight", 0, RD_POLICY_MAX_IN_FLIGHT_MAX,
               &out->group_max_in_flight,
               "group_max_in_flight must be an integer between 0 (no cap) and 1000000.", errs);
    rate_member(doc, true, &out->group_per_second, &out->group_burst, errs);
    rd_json_t *fg = rd_json_get(doc, "fifo_groups");
    if (fg && !rd_json_is_null(fg)) {
        if (rd_json_is_bool(fg)) out->fifo_groups = rd_json_bool(fg) ? 1 : 0;
        else rd_field_errors_add(errs, "fifo_groups", "invalid", "fifo_groups must be a boolean.");
    }
    sqs_members(doc, out, errs);
    /* shards: 1-64 (docs/reference.md "Shards"); left out, it is kept. Not
     * nullable: a lowering names its count. */
    _Static_assert(RD_SHARDS_MAX == 64, "the message names the bound");
    const char *shards_why = "shards must be an integer between 1 and 64.";
    rd_json_t *sh = rd_json_get(doc, "shards");
    if (sh && rd_json_is_null(sh)) rd_field_errors_add(errs, "shards", "invalid", shards_why);
    else int_member(doc, "shards", "shards", 1, RD_SHARDS_MAX, &out->shards, shards_why, errs);
    static const char *const nullable[] = {
#define RD_POLICY_NAME(name) #name,
        RD_POLICY_FIELDS(RD_POLICY_NAME)
#undef RD_POLICY_NAME
    };
    for (size_t i = 0; i < RD_POLICY_FIELD_COUNT; i++) {
        rd_json_t *v = rd_json_get(doc, nullable[i]);
        if (v && rd_json_is_null(v)) out->nulls |= 1u << i;
    }
    for (size_t i = 0; i < rd_json_object_size(doc); i++) {
        const char *name = rd_json_object_key_at(doc, i);
        bool known = false;
        for (size_t k = 0; !known && k < sizeof KNOWN / sizeof KNOWN[0]; k++)
            known = strcmp(name, KNOWN[k]) == 0;
        if (!known) {
            /* The name outlives the document: the 422 is written before the
             * next request is parsed (as request.c's item names). */
            static char unknown[64];
            snprintf(unknown, sizeof unknown, "%s", name);
            rd_field_errors_add(errs, unknown, "invalid",
                                "not a policy field (see GET /queues/{q}/policy).");
            break;
        }
    }
    rd_json_free(doc);
    if (errs->count == 0) return RD_REQ_OK;
    rd_policy_free(out);
    return RD_REQ_INVALID;
}
