/* router.c - path matching against a route table. */
#include "retryd/router.h"

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hex.h"

long rd_percent_decode(const char *s, size_t len, char *out, bool plus_is_space)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len) return -1;
            int hi = rd_hex_digit(s[i + 1]), lo = rd_hex_digit(s[i + 2]);
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

/* Only the canonical decimal form: "001" is not message 1 (one path per
 * message, as Location gives it). */
static bool parse_id(const char *s, size_t len, long long *out)
{
    if (len == 0 || len > 15 || s[0] == '0') return false;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1) return false;
    *out = v;
    return true;
}

/* A prefix row: the pattern itself or anything under "<pattern>/". */
static bool prefix_matches(const char *pattern, const char *path, size_t len)
{
    size_t n = strlen(pattern);
    return len >= n && memcmp(path, pattern, n) == 0 && (len == n || path[n] == '/');
}

static void allow_add(char *allow, size_t size, rd_http_method_t method)
{
    const char *name = rd_http_method_name(method);
    size_t used = strlen(allow);
    snprintf(allow + used, size - used, "%s%s", used ? ", " : "", name);
}

rd_route_outcome_t rd_router_match(const rd_route_t *routes, size_t n, rd_http_method_t method,
                                   const char *path, size_t len, rd_route_match_t *m)
{
    memset(m, 0, sizeof *m);
    bool path_known = false;
    rd_http_method_t lookup = method == RD_HTTP_HEAD ? RD_HTTP_GET : method;
    for (size_t i = 0; i < n; i++) {
        const rd_route_t *r = &routes[i];
        const char *q = NULL, *id = NULL;
        size_t q_len = 0, id_len = 0;
        bool hit = r->flags & RD_ROUTE_PREFIX
                       ? prefix_matches(r->pattern, path, len)
                       : path_matches(r->pattern, path, len, &q, &q_len, &id, &id_len);
        if (!hit) continue;
        if (r->method != lookup) {
            path_known = true;
            allow_add(m->allow, sizeof m->allow, r->method);
            continue;
        }
        if (id && !parse_id(id, id_len, &m->id)) return RD_ROUTE_BAD_ID;
        m->route = r;
        m->allow[0] = '\0';
        if (q) {
            m->queue = rd_malloc(q_len + 1);
            long d = rd_percent_decode(q, q_len, m->queue, false);
            m->queue_decoded = d >= 0;
            m->queue_len = d >= 0 ? (size_t)d : 0;
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
