/* policy.c - a queue's policy: the PUT body, the stored pairs, the JSON. */
#include "retryd/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/config.h"
#include "retryd/json.h"
#include "retryd/limits.h"
#include "retryd/utf8.h"

#define POLICY_BASE_DEFAULT 1
#define POLICY_MAX_DEFAULT 3600

void rd_policy_init(rd_policy_t *p)
{
    memset(p, 0, sizeof *p);
    p->dead_ttl_s = -1;
    p->succeeded_ttl_s = -1;
}

void rd_policy_free(rd_policy_t *p)
{
    rd_free(p->rules_owned);
    p->rules_owned = NULL;
    rd_free(p->alert_url_owned);
    p->alert_url_owned = NULL;
    p->alert_url = NULL;
    p->alert_url_len = 0;
    p->rules = NULL;
    p->rules_len = 0;
}

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
        rd_field_errors_add(errs, name, "invalid", strcmp(name, "backoff") == 0
                            ? "backoff must be an object {base_seconds?, max_seconds?, jitter?}."
                            : "rate_limit must be null or an object {per_second, burst}.");
        return NULL;
    }
    return v;
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

bool rd_policy_alert_url_valid(const char *s, size_t len)
{
    if (s == NULL || len < 1 || len > RD_POLICY_ALERT_URL_MAX || !rd_utf8_valid(s, len))
        return false;
    size_t scheme;
    if (len > 7 && memcmp(s, "http://", 7) == 0) scheme = 7;
    else if (len > 8 && memcmp(s, "https://", 8) == 0) scheme = 8;
    else return false;
    if (s[scheme] == '/' || s[scheme] == '?' || s[scheme] == '#') return false;  /* no host */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f) return false;
        /* C1 controls, U+0080-U+009F: C2 80-C2 9F */
        if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] <= 0x9f) return false;
    }
    return true;
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

static const char *const KNOWN[] = { "max_retries", "backoff", "lease_seconds", "dead_ttl",
                                     "succeeded_ttl", "max_in_flight", "rate_limit", "paused",
                                     "queue", "dead_letter_rules", "alert_url" };

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
    int_member(doc, "max_retries", "max_retries", 1, RD_MAX_RETRIES_MAX, &out->max_retries,
               "max_retries must be between 1 and " RD_LIMIT_STR(RD_MAX_RETRIES_MAX) ".", errs);
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
    rd_json_t *r = object_member(doc, "rate_limit", errs);
    if (r) {
        rd_json_t *ps = rd_json_get(r, "per_second");
        double v;
        if (ps == NULL || rd_json_is_null(ps))
            rd_field_errors_add(errs, "rate_limit.per_second", "required",
                                "rate_limit.per_second is required.");
        else if (!rd_json_number(ps, &v) || v < 0.001 || v > 100000)
            rd_field_errors_add(errs, "rate_limit.per_second", "invalid",
                                "rate_limit.per_second must be a number between 0.001 and 100000.");
        else
            out->per_second = v;
        rd_json_t *bu = rd_json_get(r, "burst");
        if (bu == NULL || rd_json_is_null(bu))
            rd_field_errors_add(errs, "rate_limit.burst", "required", "rate_limit.burst is required.");
        else
            int_member(r, "burst", "rate_limit.burst", 1, 100000, &out->burst,
                       "rate_limit.burst must be an integer between 1 and 100000.", errs);
    }
    rules_member(doc, out, errs);
    alert_url_member(doc, body, len, has_nul, out, errs);
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

size_t rd_policy_args(const rd_policy_t *p, const char *out[RD_POLICY_ARGS_MAX],
                      char values[RD_POLICY_ARGS_MAX / 2][32])
{
    size_t n = 0;
#define PAIR(name, ...)                                                 \
    do {                                                                \
        snprintf(values[n / 2], sizeof values[0], __VA_ARGS__);         \
        out[n] = name;                                                  \
        out[n + 1] = values[n / 2];                                     \
        n += 2;                                                         \
    } while (0)
    if (p->max_retries > 0) PAIR("max_retries", "%lld", p->max_retries);
    if (p->base_seconds > 0) PAIR("backoff.base_seconds", "%lld", p->base_seconds);
    if (p->max_seconds > 0) PAIR("backoff.max_seconds", "%lld", p->max_seconds);
    if (p->jitter[0]) PAIR("backoff.jitter", "%s", p->jitter);
    if (p->lease_seconds > 0) PAIR("lease_seconds", "%lld", p->lease_seconds);
    if (p->dead_ttl_s >= 0) PAIR("dead_ttl", "%lld", p->dead_ttl_s);
    if (p->succeeded_ttl_s >= 0) PAIR("succeeded_ttl", "%lld", p->succeeded_ttl_s);
    if (p->max_in_flight > 0) PAIR("max_in_flight", "%lld", p->max_in_flight);
    if (p->per_second > 0) {
        PAIR("rate_limit.per_second", "%.17g", p->per_second);
        PAIR("rate_limit.burst", "%lld", p->burst);
    }
#undef PAIR
    return n;
}

static bool str_is(const rd_str_t *s, const char *lit)
{
    return s->len == strlen(lit) && memcmp(s->ptr, lit, s->len) == 0;
}

bool rd_policy_from_pairs(rd_policy_t *p, const rd_str_t *pairs, size_t n)
{
    rd_policy_init(p);
    if (n % 2 != 0) return false;
    for (size_t i = 0; i < n; i += 2) {
        const rd_str_t *name = &pairs[i];
        if (str_is(name, "dead_letter_rules")) {
            p->rules = pairs[i + 1].ptr;
            p->rules_len = pairs[i + 1].len;
            continue;
        }
        if (str_is(name, "alert_url")) {
            /* Shown only as the library checks it (a hand-written value
             * that is no URL is shown as not set, as alerts_take treats it). */
            if (rd_policy_alert_url_valid(pairs[i + 1].ptr, pairs[i + 1].len)) {
                p->alert_url = pairs[i + 1].ptr;
                p->alert_url_len = pairs[i + 1].len;
            }
            continue;
        }
        char v[64];
        if (pairs[i + 1].len >= sizeof v) return false;
        memcpy(v, pairs[i + 1].ptr, pairs[i + 1].len);
        v[pairs[i + 1].len] = '\0';
        char *end;
        if (str_is(name, "backoff.jitter")) {
            if (pairs[i + 1].len >= sizeof p->jitter) return false;
            memcpy(p->jitter, v, pairs[i + 1].len + 1);
            continue;
        }
        if (str_is(name, "rate_limit.per_second")) {
            p->per_second = strtod(v, &end);
            if (*end != '\0') return false;
            continue;
        }
        long long x = strtoll(v, &end, 10);
        if (*end != '\0' || end == v) return false;
        if (str_is(name, "max_retries")) p->max_retries = x;
        else if (str_is(name, "backoff.base_seconds")) p->base_seconds = x;
        else if (str_is(name, "backoff.max_seconds")) p->max_seconds = x;
        else if (str_is(name, "lease_seconds")) p->lease_seconds = x;
        else if (str_is(name, "dead_ttl")) p->dead_ttl_s = x;
        else if (str_is(name, "succeeded_ttl")) p->succeeded_ttl_s = x;
        else if (str_is(name, "max_in_flight")) p->max_in_flight = x;
        else if (str_is(name, "rate_limit.burst")) p->burst = x;
        else if (str_is(name, "paused")) p->paused = x == 1;
        /* A field of a later library version is not shown. */
    }
    return true;
}

/* The stored rules, re-read and written field by field in one order (a
 * value no library writes is left out, so the answer stays valid JSON). */
static void write_rules(rd_jsonw_t *w, const rd_policy_t *p)
{
    rd_jsonw_array_open(w);
    rd_json_t *list = p->rules ? rd_json_parse(p->rules, p->rules_len, NULL) : NULL;
    for (size_t i = 0; list && rd_json_is_array(list) && i < rd_json_array_size(list); i++) {
        const rd_json_t *r = rd_json_array_at(list, i);
        if (!rd_json_is_object(r)) continue;
        rd_jsonw_object_open(w);
        static const char *const texts[] = { "error_contains", "error_prefix", "action" };
        for (size_t j = 0; j < 3; j++) {
            rd_json_t *v = rd_json_get(r, texts[j]);
            const char *s = v ? rd_json_string(v) : NULL;
            if (s == NULL || !rd_utf8_valid(s, strlen(s))) continue;
            rd_jsonw_key(w, texts[j]);
            rd_jsonw_string(w, s);
        }
        static const char *const nums[] = { "delay_seconds", "max_times" };
        for (size_t j = 0; j < 2; j++) {
            rd_json_t *v = rd_json_get(r, nums[j]);
            long long x;
            if (v == NULL || !rd_json_integer(v, &x)) continue;
            rd_jsonw_key(w, nums[j]);
            rd_jsonw_int(w, x);
        }
        rd_jsonw_object_close(w);
    }
    rd_json_free(list);
    rd_jsonw_array_close(w);
}

void rd_policy_write_json(rd_jsonw_t *w, const rd_policy_t *p, const rd_policy_defaults_t *d,
                          const char *queue, size_t queue_len)
{
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "queue");
    rd_jsonw_stringn(w, queue, queue_len);
    rd_jsonw_key(w, "paused");
    rd_jsonw_bool(w, p->paused);
    rd_jsonw_key(w, "max_retries");
    rd_jsonw_int(w, p->max_retries > 0 ? p->max_retries : RD_MAX_RETRIES_DEFAULT);
    rd_jsonw_key(w, "backoff");
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "base_seconds");
    rd_jsonw_int(w, p->base_seconds > 0 ? p->base_seconds : POLICY_BASE_DEFAULT);
    rd_jsonw_key(w, "max_seconds");
    rd_jsonw_int(w, p->max_seconds > 0 ? p->max_seconds : POLICY_MAX_DEFAULT);
    rd_jsonw_key(w, "jitter");
    rd_jsonw_string(w, p->jitter[0] ? p->jitter : "none");
    rd_jsonw_object_close(w);
    rd_jsonw_key(w, "lease_seconds");
    rd_jsonw_int(w, p->lease_seconds > 0 ? p->lease_seconds : d->lease_ms / 1000);
    rd_jsonw_key(w, "dead_ttl");
    rd_jsonw_int(w, p->dead_ttl_s >= 0 ? p->dead_ttl_s : d->dead_ttl_ms / 1000);
    rd_jsonw_key(w, "succeeded_ttl");
    rd_jsonw_int(w, p->succeeded_ttl_s >= 0 ? p->succeeded_ttl_s : d->succeeded_ttl_ms / 1000);
    rd_jsonw_key(w, "max_in_flight");
    rd_jsonw_int(w, p->max_in_flight);
    rd_jsonw_key(w, "rate_limit");
    if (p->per_second > 0) {
        rd_jsonw_object_open(w);
        rd_jsonw_key(w, "per_second");
        rd_jsonw_number(w, p->per_second);
        rd_jsonw_key(w, "burst");
        rd_jsonw_int(w, p->burst);
        rd_jsonw_object_close(w);
    } else {
        rd_jsonw_null(w);
    }
    rd_jsonw_key(w, "dead_letter_rules");
    write_rules(w, p);
    rd_jsonw_key(w, "alert_url");
    if (p->alert_url) rd_jsonw_stringn(w, p->alert_url, p->alert_url_len);
    else rd_jsonw_null(w);
    rd_jsonw_object_close(w);
}
