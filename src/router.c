/* router.c - the route table and path matching. */
#include "retryd/router.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"

/* Pattern segments: "{q}" captures the queue, "{id}" the message id. */
static const struct {
    rd_http_method_t method;
    const char *pattern;
    rd_route_t route;
} routes[] = {
    { RD_HTTP_GET, "/healthz", RD_ROUTE_HEALTHZ },
    { RD_HTTP_GET, "/readyz", RD_ROUTE_READYZ },
    { RD_HTTP_POST, "/queues/{q}/messages", RD_ROUTE_ENQUEUE },
    { RD_HTTP_GET, "/queues/{q}/messages", RD_ROUTE_LIST },
    { RD_HTTP_GET, "/queues/{q}/messages/{id}", RD_ROUTE_GET },
    { RD_HTTP_POST, "/queues/{q}/claim", RD_ROUTE_CLAIM },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/succeed", RD_ROUTE_SUCCEED },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/fail", RD_ROUTE_FAIL },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/replay", RD_ROUTE_REPLAY },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/extend", RD_ROUTE_EXTEND },
    { RD_HTTP_POST, "/queues/{q}/succeed", RD_ROUTE_SUCCEED_MANY },
    { RD_HTTP_POST, "/queues/{q}/messages/{id}/kill", RD_ROUTE_KILL },
    { RD_HTTP_DELETE, "/queues/{q}/messages/{id}", RD_ROUTE_DELETE },
    { RD_HTTP_POST, "/queues/{q}/replay", RD_ROUTE_REPLAY_MANY },
    { RD_HTTP_GET, "/queues", RD_ROUTE_QUEUES },
    { RD_HTTP_GET, "/queues/{q}/stats", RD_ROUTE_STATS },
    { RD_HTTP_GET, "/metrics", RD_ROUTE_METRICS },
};

static const char *method_name(rd_http_method_t m)
{
    switch (m) {
    case RD_HTTP_GET: return "GET";
    case RD_HTTP_HEAD: return "HEAD";
    case RD_HTTP_POST: return "POST";
    case RD_HTTP_PUT: return "PUT";
    case RD_HTTP_PATCH: return "PATCH";
    case RD_HTTP_DELETE: return "DELETE";
    case RD_HTTP_OPTIONS: return "OPTIONS";
    default: return "OTHER";
    }
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long rd_percent_decode(const char *s, size_t len, char *out, bool plus_is_space)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len) return -1;
            int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
            if (hi < 0 || lo < 0) return -1;
            out[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else if (s[i] == '+' && plus_is_space) {
            out[n++] = ' ';
        } else {
            out[n++] = s[i];
        }
    }
    out[n] = '\0';
    return (long)n;
}

/* Walks pattern against path; captures {q} and {id} spans. */
static bool path_matches(const char *pattern, const char *path, size_t len,
                         const char **q, size_t *q_len, const char **id, size_t *id_len)
{
    const char *p = pattern, *s = path, *end = path + len;
    while (*p) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            const char *seg_end = memchr(s, '/', (size_t)(end - s));
            if (seg_end == NULL) seg_end = end;
            if (p[1] == 'q') {
                *q = s;
                *q_len = (size_t)(seg_end - s);
            } else {
                if (seg_end == s) return false;  /* "/messages/" is no message */
                *id = s;
                *id_len = (size_t)(seg_end - s);
            }
            s = seg_end;
            p = close + 1;
            continue;
        }
        if (s == end || *s != *p) return false;
        s++;
        p++;
    }
    return s == end;
}

static bool parse_id(const char *s, size_t len, long long *out)
{
    if (len == 0 || len > 15) return false;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1) return false;
    *out = v;
    return true;
}

rd_route_outcome_t rd_router_match(rd_http_method_t method, const char *path, size_t len,
                                   rd_route_match_t *m)
{
    memset(m, 0, sizeof *m);
    /* The console's files: a prefix, not a pattern. */
    if ((len == 3 && memcmp(path, "/ui", 3) == 0) || (len > 3 && memcmp(path, "/ui/", 4) == 0)) {
        if (method == RD_HTTP_GET || method == RD_HTTP_HEAD) {
            m->route = RD_ROUTE_UI;
            return RD_ROUTE_MATCHED;
        }
        snprintf(m->allow, sizeof m->allow, "GET");
        return RD_ROUTE_NO_METHOD;
    }
    bool path_known = false;
    rd_http_method_t lookup = method == RD_HTTP_HEAD ? RD_HTTP_GET : method;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *q = NULL, *id = NULL;
        size_t q_len = 0, id_len = 0;
        if (!path_matches(routes[i].pattern, path, len, &q, &q_len, &id, &id_len)) continue;
        if (routes[i].method != lookup) {
            if (!path_known) m->allow[0] = '\0';
            path_known = true;
            size_t used = strlen(m->allow);
            snprintf(m->allow + used, sizeof m->allow - used, "%s%s", used ? ", " : "",
                     method_name(routes[i].method));
            continue;
        }
        if (id && !parse_id(id, id_len, &m->id)) return RD_ROUTE_BAD_ID;
        m->route = routes[i].route;
        if (q) {
            m->queue = rd_malloc(q_len + 1);
            long n = rd_percent_decode(q, q_len, m->queue, false);
            m->queue_decoded = n >= 0;
            m->queue_len = n >= 0 ? (size_t)n : 0;
        }
        return RD_ROUTE_MATCHED;
    }
    return path_known ? RD_ROUTE_NO_METHOD : RD_ROUTE_NO_PATH;
}

void rd_route_match_free(rd_route_match_t *m)
{
    rd_free(m->queue);
    m->queue = NULL;
}
