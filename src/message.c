/* message.c - message fields and the message's JSON form. */
#include "retryd/message.h"


#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const status_names[] = { "pending", "processing", "succeeded", "dead" };

const char *rd_status_name(rd_status_t s)
{
    return s < RD_STATUS_UNKNOWN ? status_names[s] : "unknown";
}

rd_status_t rd_status_parse(const char *s, size_t len)
{
    for (int i = 0; i < RD_STATUS_UNKNOWN; i++) {
        if (strlen(status_names[i]) == len && memcmp(status_names[i], s, len) == 0)
            return (rd_status_t)i;
    }
    return RD_STATUS_UNKNOWN;
}

void rd_message_init(rd_message_t *m)
{
    memset(m, 0, sizeof *m);
    m->status = RD_STATUS_UNKNOWN;
    m->retry_after_ms = -1;
    m->lease_expires_at_ms = -1;
    m->expires_at_ms = -1;
    m->origin_id = -1;
    m->first_received_at_ms = -1;
}

long long rd_str_to_ll(const char *v, size_t len)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *end;
    long long n = strtoll(tmp, &end, 10);
    return *end == '\0' ? n : -1;
}

long long rd_str_number(const rd_str_t *s)
{
    if (s == NULL || s->ptr == NULL) return 0;
    long long n = rd_str_to_ll(s->ptr, s->len);
    return n < 0 && !(s->len > 1 && s->ptr[0] == '-') ? 0 : n;
}

#define FIELD_IS(lit) (name_len == sizeof(lit) - 1 && memcmp(name, lit, name_len) == 0)

void rd_message_set_field(rd_message_t *m, const char *name, size_t name_len,
                          const char *value, size_t value_len)
{
    rd_str_t str = { value, value_len };
    if (FIELD_IS("payload")) m->payload = str;
    else if (FIELD_IS("status")) m->status = rd_status_parse(value, value_len);
    else if (FIELD_IS("retry_count")) m->retry_count = (int)rd_str_to_ll(value, value_len);
    else if (FIELD_IS("max_retries")) m->max_retries = (int)rd_str_to_ll(value, value_len);
    else if (FIELD_IS("priority")) m->priority = (int)rd_str_to_ll(value, value_len);
    else if (FIELD_IS("expires_at")) m->expires_at_ms = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("retry_after")) m->retry_after_ms = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("last_error")) m->last_error = str;
    else if (FIELD_IS("lease_expires_at")) m->lease_expires_at_ms = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("lease_token")) m->lease_token = str;
    else if (FIELD_IS("idempotency_key")) m->idempotency_key = str;
    else if (FIELD_IS("created_at")) m->created_at_ms = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("updated_at")) m->updated_at_ms = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("worker")) m->worker = str;
    else if (FIELD_IS("history_dropped")) m->history_dropped = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("origin_queue")) m->origin_queue = str;
    else if (FIELD_IS("origin_id")) m->origin_id = rd_str_to_ll(value, value_len);
    else if (FIELD_IS("redriving_to")) m->redriving_to = str;
    else if (FIELD_IS("group")) m->group = str;
    else if (FIELD_IS("attributes")) m->attributes = str;
    else if (FIELD_IS("first_received_at")) m->first_received_at_ms = rd_str_to_ll(value, value_len);
}

/* Civil date from days since 1970-01-01 (Howard Hinnant's algorithm): no
 * gmtime_r/strftime on the hot path of every message written. */
static void civil_from_days(long long z, int *y, unsigned *m, unsigned *d)
{
    z += 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static char *put_digits(char *p, unsigned v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

void rd_format_time_ms(long long epoch_ms, char *out)
{
    long long secs = epoch_ms / 1000;
    long long ms = epoch_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    long long days = secs / 86400;
    long long rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days -= 1;
    }
    int y;
    unsigned mo, d;
    civil_from_days(days, &y, &mo, &d);
    if (y < 0 || y > 9999) {  /* out of RFC 3339's range: not a time we write */
        snprintf(out, 32, "%s", y < 0 ? "0000-01-01T00:00:00.000Z" : "9999-12-31T23:59:59.999Z");
        return;
    }
    char *p = put_digits(out, (unsigned)y, 4);
    *p++ = '-';
    p = put_digits(p, mo, 2);
    *p++ = '-';
    p = put_digits(p, d, 2);
    *p++ = 'T';
    p = put_digits(p, (unsigned)(rem / 3600), 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)(rem % 3600 / 60), 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)(rem % 60), 2);
    *p++ = '.';
    p = put_digits(p, (unsigned)ms, 3);
    *p++ = 'Z';
    *p = '\0';
}

static void put_time(rd_jsonw_t *w, const char *name, long long ms)
{
    rd_jsonw_key(w, name);
    if (ms < 0) {
        rd_jsonw_null(w);
        return;
    }
    char ts[32];
    rd_format_time_ms(ms, ts);
    rd_jsonw_plain_string(w, ts, strlen(ts));
}

static void put_optional_string(rd_jsonw_t *w, const char *name, rd_str_t s)
{
    rd_jsonw_key(w, name);
    if (s.ptr) rd_jsonw_stringn(w, s.ptr, s.len);
    else rd_jsonw_null(w);
}

/* The history array: {attempt, error, at, lease_expired, worker} per failure,
 * {replayed_at} per replay mark, {snoozed_at, until} per snooze mark, oldest
 * first (docs/reference.md "History"). */
static void put_history(rd_jsonw_t *w, const rd_str_t *h, size_t n)
{
    rd_jsonw_key(w, "history");
    rd_jsonw_array_open(w);
    if (h == NULL) n = 0;
    for (size_t i = 0; i + RD_HISTORY_FIELDS <= n; i += RD_HISTORY_FIELDS) {
        size_t len[RD_HISTORY_FIELDS];
        const char *f[RD_HISTORY_FIELDS];
        for (size_t j = 0; j < RD_HISTORY_FIELDS; j++) {
            f[j] = h[i + j].ptr;
            len[j] = h[i + j].len;
            if (f[j] == NULL) {
                f[j] = "";
                len[j] = 0;
            }
        }
        long long at = rd_str_to_ll(f[1], len[1]);
        rd_jsonw_object_open(w);
        if (len[0] == 8 && memcmp(f[0], "replayed", 8) == 0) {
            put_time(w, "replayed_at", at);
        } else if (len[0] == 7 && memcmp(f[0], "snoozed", 7) == 0) {
            put_time(w, "snoozed_at", at);
            put_time(w, "until", rd_str_to_ll(f[2], len[2]));
        } else {
            rd_jsonw_key(w, "attempt");
            rd_jsonw_int(w, rd_str_to_ll(f[2], len[2]));
            rd_jsonw_key(w, "error");
            rd_jsonw_stringn(w, f[5], len[5]);
            put_time(w, "at", at);
            rd_jsonw_key(w, "lease_expired");
            rd_jsonw_bool(w, len[3] == 1 && f[3][0] == '1');
            put_optional_string(w, "worker", (rd_str_t){ len[4] ? f[4] : NULL, len[4] });
        }
        rd_jsonw_object_close(w);
    }
    rd_jsonw_array_close(w);
}

void rd_message_write_json(rd_jsonw_t *w, const rd_message_t *m, const char *queue,
                           size_t queue_len, bool with_token)
{
    rd_jsonw_object_open(w);
    rd_jsonw_key(w, "id");
    rd_jsonw_int(w, m->id);
    rd_jsonw_key(w, "queue");
    rd_jsonw_stringn(w, queue, queue_len);
    rd_jsonw_key(w, "payload");
    rd_jsonw_stringn(w, m->payload.ptr ? m->payload.ptr : "", m->payload.len);
    rd_jsonw_key(w, "status");
    rd_jsonw_string(w, rd_status_name(m->status));
    rd_jsonw_key(w, "retry_count");
    rd_jsonw_int(w, m->retry_count);
    rd_jsonw_key(w, "max_retries");
    rd_jsonw_int(w, m->max_retries);
    rd_jsonw_key(w, "priority");
    rd_jsonw_int(w, m->priority);
    put_optional_string(w, "group", m->group);
    put_time(w, "retry_after", m->retry_after_ms);
    put_optional_string(w, "last_error", m->last_error);
    put_time(w, "lease_expires_at", m->lease_expires_at_ms);
    if (with_token) put_optional_string(w, "lease_token", m->lease_token);
    if (m->idempotency_key.ptr) put_optional_string(w, "idempotency_key", m->idempotency_key);
    put_time(w, "created_at", m->created_at_ms);
    put_time(w, "updated_at", m->updated_at_ms);
    put_time(w, "expires_at", m->expires_at_ms);
    put_optional_string(w, "worker", m->worker);
    put_history(w, m->history, m->history_len);
    rd_jsonw_key(w, "history_dropped");
    rd_jsonw_int(w, m->history_dropped);
    if (m->origin_queue.ptr && m->origin_id > 0) {
        rd_jsonw_key(w, "origin");
        rd_jsonw_object_open(w);
        rd_jsonw_key(w, "queue");
        rd_jsonw_stringn(w, m->origin_queue.ptr, m->origin_queue.len);
        rd_jsonw_key(w, "id");
        rd_jsonw_int(w, m->origin_id);
        rd_jsonw_object_close(w);
    }
    if (m->redriving_to.ptr) put_optional_string(w, "redriving_to", m->redriving_to);
    rd_jsonw_object_close(w);
}
