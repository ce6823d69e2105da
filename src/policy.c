/* policy.c - a queue's policy: the PUT body, the stored pairs, the JSON. */
#include "retryd/policy.h"

#include <assert.h>
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
    p->message_ttl_s = -1;
    p->max_in_flight = -1;
    p->group_max_in_flight = -1;
    p->fifo_groups = -1;
    p->delay_seconds = -1;
    p->wait_seconds = -1;
    p->sqs = -1;
    p->content_based_dedup = -1;
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
    rd_free(p->dead_letter_queue_owned);
    p->dead_letter_queue_owned = NULL;
    p->dead_letter_queue = NULL;
    p->dead_letter_queue_len = 0;
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
    else if (p->max_retries == RD_POLICY_UNLIMITED) PAIR("max_retries", "%s", "unlimited");
    if (p->base_seconds > 0) PAIR("backoff.base_seconds", "%lld", p->base_seconds);
    if (p->max_seconds > 0) PAIR("backoff.max_seconds", "%lld", p->max_seconds);
    if (p->jitter[0]) PAIR("backoff.jitter", "%s", p->jitter);
    if (p->lease_seconds > 0) PAIR("lease_seconds", "%lld", p->lease_seconds);
    if (p->dead_ttl_s >= 0) PAIR("dead_ttl", "%lld", p->dead_ttl_s);
    if (p->succeeded_ttl_s >= 0) PAIR("succeeded_ttl", "%lld", p->succeeded_ttl_s);
    /* 0 is sent too: a PATCH with max_in_flight 0 removes the cap. */
    if (p->max_in_flight >= 0) PAIR("max_in_flight", "%lld", p->max_in_flight);
    if (p->per_second > 0) {
        PAIR("rate_limit.per_second", "%.17g", p->per_second);
        PAIR("rate_limit.burst", "%lld", p->burst);
    }
    if (p->message_ttl_s >= 0) PAIR("message_ttl", "%lld", p->message_ttl_s);
    if (p->on_expiry[0]) PAIR("on_expiry", "%s", p->on_expiry);
    if (p->group_max_in_flight >= 0) PAIR("group_max_in_flight", "%lld", p->group_max_in_flight);
    if (p->group_per_second > 0) {
        PAIR("group_rate_limit.per_second", "%.17g", p->group_per_second);
        PAIR("group_rate_limit.burst", "%lld", p->group_burst);
    }
    if (p->fifo_groups >= 0) PAIR("fifo_groups", "%s", p->fifo_groups ? "true" : "false");
    if (p->lease_expiry[0]) PAIR("lease_expiry", "%s", p->lease_expiry);
    if (p->delay_seconds >= 0) PAIR("delay_seconds", "%lld", p->delay_seconds);
    if (p->max_payload_bytes > 0) PAIR("max_payload_bytes", "%lld", p->max_payload_bytes);
    if (p->wait_seconds >= 0) PAIR("wait_seconds", "%lld", p->wait_seconds);
    if (p->sqs >= 0) PAIR("sqs", "%s", p->sqs ? "true" : "false");
    if (p->content_based_dedup >= 0)
        PAIR("content_based_dedup", "%s", p->content_based_dedup ? "true" : "false");
#undef PAIR
    assert(n <= RD_POLICY_ARGS_MAX);
    return n;
}

static bool str_is(const rd_str_t *s, const char *lit)
{
    return s->len == strlen(lit) && memcmp(s->ptr, lit, s->len) == 0;
}

/* One "layout.<field>" pair of policy_get (lua/06_shards.lua): the numbers
 * and the salts; the shard's own state (index, digest) and fields of a later
 * library are not read. */
static bool layout_from_pair(rd_policy_t *p, const rd_str_t *name, const rd_str_t *value)
{
    rd_str_t field = { name->ptr + 7, name->len - 7 };
    if (str_is(&field, "salts")) {
        p->layout.salts = *value;
        return true;
    }
    long long *x = str_is(&field, "rev") ? &p->layout.rev
                   : str_is(&field, "hw") ? &p->layout.hw
                   : str_is(&field, "from") ? &p->layout.from
                   : str_is(&field, "lowering") ? &p->layout.lowering : NULL;
    if (x == NULL) return true;
    char v[24];
    if (value->len == 0 || value->len >= sizeof v) return false;
    memcpy(v, value->ptr, value->len);
    v[value->len] = '\0';
    char *end;
    *x = strtoll(v, &end, 10);
    return *end == '\0';
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
        if (str_is(name, "dead_letter_queue")) {
            p->dead_letter_queue = pairs[i + 1].ptr;
            p->dead_letter_queue_len = pairs[i + 1].len;
            continue;
        }
        if (name->len > 7 && memcmp(name->ptr, "layout.", 7) == 0) {
            if (!layout_from_pair(p, name, &pairs[i + 1])) return false;
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
        if (str_is(name, "on_expiry")) {
            if (pairs[i + 1].len >= sizeof p->on_expiry) return false;
            memcpy(p->on_expiry, v, pairs[i + 1].len + 1);
            continue;
        }
        if (str_is(name, "rate_limit.per_second") || str_is(name, "group_rate_limit.per_second")) {
            double *rate = name->ptr[0] == 'g' ? &p->group_per_second : &p->per_second;
            *rate = strtod(v, &end);
            if (*end != '\0') return false;
            continue;
        }
        int *flag = str_is(name, "fifo_groups") ? &p->fifo_groups
                    : str_is(name, "sqs") ? &p->sqs
                    : str_is(name, "content_based_dedup") ? &p->content_based_dedup : NULL;
        if (flag) {
            if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) return false;
            *flag = v[0] == 't';
            continue;
        }
        if (str_is(name, "lease_expiry")) {
            if (strcmp(v, "backoff") != 0 && strcmp(v, "redeliver") != 0) return false;
            memcpy(p->lease_expiry, v, pairs[i + 1].len + 1);
            continue;
        }
        if (str_is(name, "max_retries") && strcmp(v, "unlimited") == 0) {
            p->max_retries = RD_POLICY_UNLIMITED;
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
        else if (str_is(name, "message_ttl")) p->message_ttl_s = x;
        else if (str_is(name, "group_max_in_flight")) p->group_max_in_flight = x;
        else if (str_is(name, "group_rate_limit.burst")) p->group_burst = x;
        else if (str_is(name, "delay_seconds")) p->delay_seconds = x;
        else if (str_is(name, "max_payload_bytes")) p->max_payload_bytes = x;
        else if (str_is(name, "wait_seconds")) p->wait_seconds = x;
        else if (str_is(name, "shards")) p->shards = x;
        else if (str_is(name, "created_at")) p->created_at_ms = x;
        else if (str_is(name, "updated_at")) p->updated_at_ms = x;
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

/* A token bucket's {per_second, burst}, or null when per_second is 0. */
static void write_rate(rd_jsonw_t *w, double per_second, long long burst)
{
    if (per_second <= 0) {
        rd_jsonw_null(w);
        return;
    }
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "per_second");
    rd_jsonw_number(w, per_second);
    rd_jsonw_key(w, "burst");
    rd_jsonw_int(w, burst);
    rd_jsonw_object_close(w);
}

void rd_policy_write_json(rd_jsonw_t *w, const rd_policy_t *p, const rd_policy_defaults_t *d,
                          const char *queue, size_t queue_len)
{
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "queue");
    rd_jsonw_stringn(w, queue, queue_len);
    rd_jsonw_key(w, "paused");
    rd_jsonw_bool(w, p->paused);
    rd_jsonw_key(w, "shards");
    rd_jsonw_int(w, p->shards > 0 ? p->shards : 1);
    rd_jsonw_key(w, "shards_settling");
    rd_jsonw_bool(w, p->layout.from > 0 || p->layout.lowering > 0);
    rd_jsonw_key(w, "max_retries");
    if (p->max_retries == RD_POLICY_UNLIMITED) rd_jsonw_string(w, "unlimited");
    else rd_jsonw_int(w, p->max_retries > 0 ? p->max_retries : RD_MAX_RETRIES_DEFAULT);
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
    rd_jsonw_int(w, p->max_in_flight > 0 ? p->max_in_flight : 0);
    rd_jsonw_key(w, "rate_limit");
    write_rate(w, p->per_second, p->burst);
    rd_jsonw_key(w, "dead_letter_rules");
    write_rules(w, p);
    rd_jsonw_key(w, "alert_url");
    if (p->alert_url) rd_jsonw_stringn(w, p->alert_url, p->alert_url_len);
    else rd_jsonw_null(w);
    rd_jsonw_key(w, "message_ttl");
    rd_jsonw_int(w, p->message_ttl_s > 0 ? p->message_ttl_s : 0);
    rd_jsonw_key(w, "on_expiry");
    rd_jsonw_string(w, strcmp(p->on_expiry, "delete") == 0 ? "delete" : "dead");
    rd_jsonw_key(w, "dead_letter_queue");
    if (p->dead_letter_queue && rd_utf8_valid(p->dead_letter_queue, p->dead_letter_queue_len))
        rd_jsonw_stringn(w, p->dead_letter_queue, p->dead_letter_queue_len);
    else
        rd_jsonw_null(w);
    rd_jsonw_key(w, "group_max_in_flight");
    rd_jsonw_int(w, p->group_max_in_flight > 0 ? p->group_max_in_flight : 0);
    rd_jsonw_key(w, "group_rate_limit");
    write_rate(w, p->group_per_second, p->group_burst);
    rd_jsonw_key(w, "fifo_groups");
    rd_jsonw_bool(w, p->fifo_groups == 1);
    rd_jsonw_key(w, "lease_expiry");
    rd_jsonw_string(w, strcmp(p->lease_expiry, "redeliver") == 0 ? "redeliver" : "backoff");
    rd_jsonw_key(w, "delay_seconds");
    rd_jsonw_int(w, p->delay_seconds > 0 ? p->delay_seconds : 0);
    rd_jsonw_key(w, "max_payload_bytes");
    if (p->max_payload_bytes > 0) rd_jsonw_int(w, p->max_payload_bytes);
    else rd_jsonw_null(w);
    rd_jsonw_key(w, "wait_seconds");
    rd_jsonw_int(w, p->wait_seconds > 0 ? p->wait_seconds : 0);
    rd_jsonw_key(w, "sqs");
    rd_jsonw_bool(w, p->sqs == 1);
    rd_jsonw_key(w, "content_based_dedup");
    rd_jsonw_bool(w, p->content_based_dedup == 1);
    static const char *const stamps[] = { "created_at", "updated_at" };
    for (size_t i = 0; i < 2; i++) {
        long long ms = i == 0 ? p->created_at_ms : p->updated_at_ms;
        rd_jsonw_key(w, stamps[i]);
        if (ms > 0) rd_jsonw_int(w, ms);
        else rd_jsonw_null(w);
    }
    rd_jsonw_object_close(w);
}
