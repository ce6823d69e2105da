/* sqs/sigv4.c - AWS Signature Version 4 for the SQS endpoint (docs/sqs.md
 * "Authentication"): the keys of --sqs-credentials, and the check of a
 * request's signature in the Authorization header or a presigned query.
 * The canonical request is AWS's, as botocore's SigV4Auth builds it for a
 * non-S3 service; SHA-256 and HMAC are OpenSSL's. */
#include "retryd/sqs/sigv4.h"

#include <errno.h>
#include <stdarg.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/hex.h"
#include "retryd/tokens.h"

enum {
    KEY_LINE_MAX = 4096,          /* bytes of one line of the credentials file */
    KEY_ID_MAX = 128,             /* AWS access key ids are 16-128 characters */
    KEY_SECRET_MAX = 256,
    KEY_PATTERN_MAX = 256,
    QUEUE_NAME_MAX = 255,         /* longer names are never allowed (SQS: 80) */
    MAX_SKEW_S = 15 * 60,         /* AWS: a request time at most 15 minutes off */
    MAX_PRESIGN_EXPIRES_S = 604800, /* AWS: a presigned URL lasts at most 7 days */
    AMZ_DATE_LEN = 16,            /* "20150830T123600Z" */
    SHA256_HEX_LEN = 64,
};

static const char ALGORITHM[] = "AWS4-HMAC-SHA256";
static const char TERMINATOR[] = "aws4_request";
static const char UNSIGNED_PAYLOAD[] = "UNSIGNED-PAYLOAD";

/* ---------------------------------------------------------------------------
 * Keys
 * ------------------------------------------------------------------------ */

struct rd_sqs_key {
    char *id;
    char *secret;          /* wiped before it is freed */
    size_t secret_len;
    char **patterns;       /* fnmatch globs on queue names; none: every queue */
    size_t pattern_count;
    unsigned roles;        /* the roles= field (tokens.h); admin without one */
    /* The last signing key derived (AWS4<secret> -> date -> region ->
     * service -> aws4_request), for its scope: a client signs for one scope a
     * day, so the four HMACs of the chain run once a day instead of per
     * request (docs/benchmarks.md "SQS endpoint"). Wiped with the secret. */
    struct signing_cache *cache;
};

struct signing_cache {
    char scope[96];        /* "date8/region/service", "" none yet */
    unsigned char key[32];
};

struct rd_sqs_keys {
    rd_sqs_key_t *keys;
    size_t count;
};

static void key_clear(rd_sqs_key_t *k)
{
    rd_free(k->id);
    if (k->secret != NULL) {
        OPENSSL_cleanse(k->secret, k->secret_len);
        rd_free(k->secret);
    }
    for (size_t i = 0; i < k->pattern_count; i++) rd_free(k->patterns[i]);
    rd_free(k->patterns);
    if (k->cache != NULL) {
        OPENSSL_cleanse(k->cache, sizeof *k->cache);
        rd_free(k->cache);
    }
    memset(k, 0, sizeof *k);
}

void rd_sqs_keys_free(rd_sqs_keys_t *keys)
{
    if (keys == NULL) return;
    for (size_t i = 0; i < keys->count; i++) key_clear(&keys->keys[i]);
    rd_free(keys->keys);
    rd_free(keys);
}

size_t rd_sqs_keys_count(const rd_sqs_keys_t *keys)
{
    return keys == NULL ? 0 : keys->count;
}

const char *rd_sqs_key_id(const rd_sqs_key_t *key)
{
    return key->id;
}

unsigned rd_sqs_key_roles(const rd_sqs_key_t *key)
{
    return key->roles;
}

bool rd_sqs_key_allows(const rd_sqs_key_t *key, const char *name, size_t len)
{
    if (key->pattern_count == 0) return true;
    if (len > QUEUE_NAME_MAX || memchr(name, '\0', len) != NULL) return false;
    char buf[QUEUE_NAME_MAX + 1];
    memcpy(buf, name, len);
    buf[len] = '\0';
    for (size_t i = 0; i < key->pattern_count; i++)
        if (fnmatch(key->patterns[i], buf, 0) == 0) return true;
    return false;
}

static bool is_alnum(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool all_in(const char *s, const char *extra)
{
    for (; *s; s++)
        if (!is_alnum(*s) && strchr(extra, *s) == NULL) return false;
    return true;
}

static const rd_sqs_key_t *keys_find(const rd_sqs_keys_t *keys, const char *id, size_t len)
{
    for (size_t i = 0; i < keys->count; i++)
        if (strlen(keys->keys[i].id) == len && memcmp(keys->keys[i].id, id, len) == 0)
            return &keys->keys[i];
    return NULL;
}

/* Parses one non-blank, non-comment line (split in place) into a new key. */
static bool keys_add_line(rd_sqs_keys_t *keys, char *line, unsigned lineno, char *why,
                          size_t why_len)
{
    char *save = NULL;
    char *id = strtok_r(line, " \t", &save);
    char *secret = strtok_r(NULL, " \t", &save);
    if (secret == NULL) {
        snprintf(why, why_len, "line %u: a key needs an access key id and a secret", lineno);
        return false;
    }
    if (strlen(id) > KEY_ID_MAX || !all_in(id, "_-")) {
        snprintf(why, why_len,
                 "line %u: the access key id must be 1-%d characters of A-Z a-z 0-9 _ -",
                 lineno, KEY_ID_MAX);
        return false;
    }
    if (strlen(secret) > KEY_SECRET_MAX || !all_in(secret, "+/=_-.~")) {
        snprintf(why, why_len,
                 "line %u: the secret must be 1-%d characters of A-Z a-z 0-9 + / = _ - . ~",
                 lineno, KEY_SECRET_MAX);
        return false;
    }
    const rd_sqs_key_t *dup = keys_find(keys, id, strlen(id));
    if (dup != NULL) {
        snprintf(why, why_len, "line %u: the access key id %s is given twice", lineno, id);
        return false;
    }
    rd_sqs_key_t k = { 0 };
    k.id = rd_strdup(id);
    k.secret_len = strlen(secret);
    k.secret = rd_strndup(secret, k.secret_len);
    k.cache = rd_calloc(1, sizeof *k.cache);
    k.roles = RD_ROLE_ADMIN;
    bool roles_given = false;
    for (char *p = strtok_r(NULL, " \t", &save); p != NULL; p = strtok_r(NULL, " \t", &save)) {
        if (strncmp(p, "roles=", 6) == 0) {
            if (roles_given || !rd_roles_parse(p + 6, strlen(p + 6), &k.roles)) {
                snprintf(why, why_len, "line %u: roles= takes once a comma list of producer, "
                         "worker, reader, operator, admin", lineno);
                key_clear(&k);
                return false;
            }
            roles_given = true;
            continue;
        }
        if (strlen(p) > KEY_PATTERN_MAX || !all_in(p, "_-.*?[]!^")) {
            snprintf(why, why_len,
                     "line %u: a queue pattern must be 1-%d characters of A-Z a-z 0-9 _ - . "
                     "and the glob characters * ? [ ] ! ^",
                     lineno, KEY_PATTERN_MAX);
            key_clear(&k);
            return false;
        }
        k.patterns = rd_realloc(k.patterns, (k.pattern_count + 1) * sizeof *k.patterns);
        k.patterns[k.pattern_count++] = rd_strdup(p);
    }
    keys->keys = rd_realloc(keys->keys, (keys->count + 1) * sizeof *keys->keys);
    keys->keys[keys->count++] = k;
    return true;
}

rd_sqs_keys_t *rd_sqs_keys_load(const char *path, char *why, size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    rd_sqs_keys_t *keys = rd_calloc(1, sizeof *keys);
    char line[KEY_LINE_MAX + 2];
    unsigned lineno = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n') {
            line[--n] = '\0';
        } else if (!feof(f)) {
            snprintf(why, why_len, "line %u: longer than %d bytes", lineno, KEY_LINE_MAX);
            ok = false;
            break;
        }
        if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
        if (memchr(line, '\0', n) != NULL || strlen(line) != n) {
            snprintf(why, why_len, "line %u: holds a NUL byte", lineno);
            ok = false;
            break;
        }
        const char *p = line + strspn(line, " \t");
        if (*p == '\0' || *p == '#') continue;
        ok = keys_add_line(keys, line, lineno, why, why_len);
    }
    if (ok && ferror(f)) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        ok = false;
    }
    fclose(f);
    OPENSSL_cleanse(line, sizeof line);
    if (ok && keys->count == 0) {
        snprintf(why, why_len, "%s holds no key", path);
        ok = false;
    }
    if (!ok) {
        rd_sqs_keys_free(keys);
        return NULL;
    }
    return keys;
}

/* ---------------------------------------------------------------------------
 * Encoding, digests and the signing key
 * ------------------------------------------------------------------------ */

typedef struct span {
    const char *p;
    size_t len;
} span_t;

static bool span_eq(span_t s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.p, lit, s.len) == 0;
}

static bool is_unreserved(unsigned char c)
{
    return is_alnum((char)c) || c == '-' || c == '_' || c == '.' || c == '~';
}

/* RFC 3986 encoding as SigV4 wants it: every byte but the unreserved ones
 * (and '/' when keep_slash) as %XX with upper-case hex. */
static void uri_encode(rd_buf_t *out, const char *s, size_t len, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            rd_buf_putc(out, (char)c);
        } else {
            char esc[3] = { '%', hex[c >> 4], hex[c & 15] };
            rd_buf_append(out, esc, 3);
        }
    }
}

/* Percent-decodes s[0..len) into out (a '%' without two hex digits stays
 * as it is; '+' is a plus sign, as RFC 3986 has it). */
static void uri_decode(rd_buf_t *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < len && (hi = rd_hex_digit(s[i + 1])) >= 0 &&
            (lo = rd_hex_digit(s[i + 2])) >= 0) {
            rd_buf_putc(out, (char)(hi * 16 + lo));
            i += 2;
        } else {
            rd_buf_putc(out, s[i]);
        }
    }
}

static void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[32];
    unsigned int md_len = 0;
    if (EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32) abort();
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[SHA256_HEX_LEN] = '\0';
}

static void hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                        unsigned char out[32])
{
    unsigned int out_len = 0;
    if (HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &out_len) == NULL || out_len != 32)
        abort();
}

/* The signature of string_to_sign (64 lower-case hex digits), from the
 * key chain AWS4<secret> -> date -> region -> service -> aws4_request. */
static void sign(const rd_sqs_key_t *key, span_t date8, span_t region, span_t service,
                 const rd_buf_t *string_to_sign, char out[SHA256_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char sig[32];
    char scope[sizeof key->cache->scope];
    int n = snprintf(scope, sizeof scope, "%.*s/%.*s/%.*s", (int)date8.len, date8.p,
                     (int)region.len, region.p, (int)service.len, service.p);
    bool cacheable = n > 0 && (size_t)n < sizeof scope;
    if (!cacheable || strcmp(scope, key->cache->scope) != 0) {
        unsigned char k[32];
        size_t seed_len = 4 + key->secret_len;
        char *seed = rd_malloc(seed_len);
        memcpy(seed, "AWS4", 4);
        memcpy(seed + 4, key->secret, key->secret_len);
        hmac_sha256(seed, seed_len, date8.p, date8.len, k);
        OPENSSL_cleanse(seed, seed_len);
        rd_free(seed);
        hmac_sha256(k, sizeof k, region.p, region.len, k);
        hmac_sha256(k, sizeof k, service.p, service.len, k);
        hmac_sha256(k, sizeof k, TERMINATOR, strlen(TERMINATOR), k);
        memcpy(key->cache->key, k, sizeof k);
        OPENSSL_cleanse(k, sizeof k);
        if (cacheable) memcpy(key->cache->scope, scope, (size_t)n + 1);
        else key->cache->scope[0] = '\0';
    }
    hmac_sha256(key->cache->key, sizeof key->cache->key, string_to_sign->data,
                string_to_sign->len, sig);
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[sig[i] >> 4];
        out[2 * i + 1] = hex[sig[i] & 15];
    }
    out[SHA256_HEX_LEN] = '\0';
}

/* ---------------------------------------------------------------------------
 * The canonical request
 * ------------------------------------------------------------------------ */

/* The path as botocore signs it for a service other than S3: empty and dot
 * segments removed from the path as sent (still percent-encoded), then each
 * byte URI-encoded once more, '/' kept; so a "%20" in the path signs as
 * "%2520". */
static void canonical_uri(rd_buf_t *out, const char *path, size_t len)
{
    if (len == 0) {
        rd_buf_putc(out, '/');
        return;
    }
    span_t *segs = rd_malloc((len + 1) * sizeof *segs);
    size_t n = 0;
    for (size_t i = 0; i <= len;) {
        const char *slash = memchr(path + i, '/', len - i);
        size_t j = slash != NULL ? (size_t)(slash - path) : len;
        span_t seg = { path + i, j - i };
        if (span_eq(seg, "..")) {
            if (n > 0) n--;
        } else if (seg.len > 0 && !span_eq(seg, ".")) {
            segs[n++] = seg;
        }
        i = j + 1;
    }
    if (path[0] == '/') rd_buf_putc(out, '/');
    for (size_t i = 0; i < n; i++) {
        if (i > 0) rd_buf_putc(out, '/');
        uri_encode(out, segs[i].p, segs[i].len, false);
    }
    if (path[len - 1] == '/' && n > 0) rd_buf_putc(out, '/');
    rd_free(segs);
}

typedef struct query_param {
    rd_buf_t name;    /* both encoded again, RFC 3986 */
    rd_buf_t value;
} query_param_t;

static int bytes_cmp(const rd_buf_t *a, const rd_buf_t *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n > 0 ? memcmp(a->data, b->data, n) : 0;
    if (c != 0) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int param_cmp(const void *pa, const void *pb)
{
    const query_param_t *a = pa, *b = pb;
    int c = bytes_cmp(&a->name, &b->name);
    return c != 0 ? c : bytes_cmp(&a->value, &b->value);
}

/* The query's parameters, each name and value decoded and encoded again,
 * sorted by name then value, "name=value" joined by '&'; without
 * X-Amz-Signature when drop_signature (the presigned form). */
static void canonical_query(rd_buf_t *out, const char *q, size_t len, bool drop_signature)
{
    size_t cap = 0;
    for (size_t i = 0; i < len; i++) cap += q[i] == '&';
    query_param_t *params = rd_calloc(cap + 1, sizeof *params);
    size_t n = 0;
    rd_buf_t tmp = RD_BUF_INIT;
    for (size_t i = 0; i < len;) {
        const char *amp = memchr(q + i, '&', len - i);
        size_t end = amp != NULL ? (size_t)(amp - q) : len;
        const char *eq = memchr(q + i, '=', end - i);
        size_t name_end = eq != NULL ? (size_t)(eq - q) : end;
        if (end > i) {
            rd_buf_reset(&tmp);
            uri_decode(&tmp, q + i, name_end - i);
            if (!(drop_signature && tmp.len == 15 && memcmp(tmp.data, "X-Amz-Signature", 15) == 0)) {
                query_param_t *p = &params[n++];
                uri_encode(&p->name, tmp.data != NULL ? tmp.data : "", tmp.len, false);
                rd_buf_reset(&tmp);
                if (eq != NULL) uri_decode(&tmp, eq + 1, end - name_end - 1);
                uri_encode(&p->value, tmp.data != NULL ? tmp.data : "", tmp.len, false);
                rd_buf_putc(&p->name, '\0');  /* data non-NULL even when empty */
                p->name.len--;
                rd_buf_putc(&p->value, '\0');
                p->value.len--;
            }
        }
        i = end + 1;
    }
    rd_buf_free(&tmp);
    qsort(params, n, sizeof *params, param_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i > 0) rd_buf_putc(out, '&');
        rd_buf_append(out, params[i].name.data, params[i].name.len);
        rd_buf_putc(out, '=');
        rd_buf_append(out, params[i].value.data, params[i].value.len);
        rd_buf_free(&params[i].name);
        rd_buf_free(&params[i].value);
    }
    rd_free(params);
}

/* The decoded value of the first query parameter named name, into out. */
static bool query_get(const rd_http_request_t *req, const char *name, rd_buf_t *out)
{
    const char *q = req->query;
    size_t len = q != NULL ? req->query_len : 0;
    rd_buf_t tmp = RD_BUF_INIT;
    bool found = false;
    for (size_t i = 0; i < len && !found;) {
        const char *amp = memchr(q + i, '&', len - i);
        size_t end = amp != NULL ? (size_t)(amp - q) : len;
        const char *eq = memchr(q + i, '=', end - i);
        size_t name_end = eq != NULL ? (size_t)(eq - q) : end;
        rd_buf_reset(&tmp);
        uri_decode(&tmp, q + i, name_end - i);
        if (tmp.len == strlen(name) && memcmp(tmp.data, name, tmp.len) == 0) {
            found = true;
            rd_buf_reset(out);
            if (eq != NULL) uri_decode(out, eq + 1, end - name_end - 1);
            rd_buf_putc(out, '\0');
            out->len--;
        }
        i = end + 1;
    }
    rd_buf_free(&tmp);
    return found;
}

/* Appends "name:value" for the header name: every line of that name in the
 * order sent, each trimmed with its inner runs of blanks made one space,
 * joined by ','. False when the request has no such header. */
static bool canonical_header(rd_buf_t *out, const rd_http_request_t *req, span_t name)
{
    bool found = false;
    size_t pos = 0;
    const char *n, *v;
    while (rd_http_request_header_next(req, &pos, &n, &v)) {
        if (strlen(n) != name.len || memcmp(n, name.p, name.len) != 0) continue;
        if (!found) {
            rd_buf_append(out, name.p, name.len);
            rd_buf_putc(out, ':');
        } else {
            rd_buf_putc(out, ',');
        }
        found = true;
        bool blank = false, any = false;
        for (; *v; v++) {
            if (*v == ' ' || *v == '\t') {
                blank = true;
                continue;
            }
            if (blank && any) rd_buf_putc(out, ' ');
            rd_buf_putc(out, *v);
            blank = false;
            any = true;
        }
    }
    if (found) rd_buf_putc(out, '\n');
    return found;
}

/* ---------------------------------------------------------------------------
 * Dates
 * ------------------------------------------------------------------------ */

static bool digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static int num(const char *s, size_t n)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

/* The time of tm (UTC) in seconds, or false when a field is out of range. */
static bool tm_seconds(struct tm *tm, long long *t)
{
    struct tm want = *tm, back;
    time_t s = timegm(tm);
    if (s == (time_t)-1 || gmtime_r(&s, &back) == NULL) return false;
    if (back.tm_year != want.tm_year || back.tm_mon != want.tm_mon ||
        back.tm_mday != want.tm_mday || back.tm_hour != want.tm_hour ||
        back.tm_min != want.tm_min || back.tm_sec != want.tm_sec)
        return false;
    *t = (long long)s;
    return true;
}

/* ISO 8601 basic, as X-Amz-Date has it: "20150830T123600Z". */
static bool parse_amz_date(const char *s, long long *t)
{
    if (strlen(s) != AMZ_DATE_LEN || !digits(s, 8) || s[8] != 'T' || !digits(s + 9, 6) ||
        s[15] != 'Z')
        return false;
    struct tm tm = { 0 };
    tm.tm_year = num(s, 4) - 1900;
    tm.tm_mon = num(s + 4, 2) - 1;
    tm.tm_mday = num(s + 6, 2);
    tm.tm_hour = num(s + 9, 2);
    tm.tm_min = num(s + 11, 2);
    tm.tm_sec = num(s + 13, 2);
    return tm_seconds(&tm, t);
}

/* The Date header: RFC 1123 ("Wed, 02 Dec 2026 14:22:34 GMT"; botocore
 * writes the zone as -0000), or the X-Amz-Date form. */
static bool parse_http_date(const char *s, long long *t)
{
    if (parse_amz_date(s, t)) return true;
    static const char *const days[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    /* "Www, DD Mmm YYYY HH:MM:SS ZONE" with the names in English whatever
     * the locale, so no strptime. */
    if (strlen(s) < 26 || s[3] != ',' || s[4] != ' ' || !digits(s + 5, 2) || s[7] != ' ' ||
        s[11] != ' ' || !digits(s + 12, 4) || s[16] != ' ' || !digits(s + 17, 2) ||
        s[19] != ':' || !digits(s + 20, 2) || s[22] != ':' || !digits(s + 23, 2) || s[25] != ' ')
        return false;
    bool day_ok = false;
    for (int i = 0; i < 7; i++) day_ok |= memcmp(s, days[i], 3) == 0;
    int mon = -1;
    for (int i = 0; i < 12; i++)
        if (memcmp(s + 8, months[i], 3) == 0) mon = i;
    const char *zone = s + 26;
    if (!day_ok || mon < 0 ||
        !(strcmp(zone, "GMT") == 0 || strcmp(zone, "UTC") == 0 || strcmp(zone, "Z") == 0 ||
          strcmp(zone, "+0000") == 0 || strcmp(zone, "-0000") == 0))
        return false;
    struct tm tm = { 0 };
    tm.tm_year = num(s + 12, 4) - 1900;
    tm.tm_mon = mon;
    tm.tm_mday = num(s + 5, 2);
    tm.tm_hour = num(s + 17, 2);
    tm.tm_min = num(s + 20, 2);
    tm.tm_sec = num(s + 23, 2);
    return tm_seconds(&tm, t);
}

static void format_amz_date(long long t, char out[AMZ_DATE_LEN + 1])
{
    time_t s = (time_t)t;
    struct tm tm;
    if (gmtime_r(&s, &tm) == NULL ||
        strftime(out, AMZ_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm) != AMZ_DATE_LEN)
        snprintf(out, AMZ_DATE_LEN + 1, "00000000T000000Z");
}

/* ---------------------------------------------------------------------------
 * The check
 * ------------------------------------------------------------------------ */

static const char MSG_MISMATCH[] =
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details.";
static const char MSG_PRESIGN_PARAMS[] =
    "AWS query-string parameters must include 'X-Amz-Algorithm', 'X-Amz-Credential', "
    "'X-Amz-Signature', 'X-Amz-Date', 'X-Amz-SignedHeaders', 'X-Amz-Expires'. Re-examine the "
    "query-string parameters.";

/* What the request says about its signature, in either form. */
typedef struct sig_parts {
    bool presigned;
    span_t credential, signed_headers, signature;
    span_t akid, date8, region, service, terminator;   /* the credential's 5 parts */
    char amz_date[AMZ_DATE_LEN + 1];
    long long time_s;
    long long expires_s;             /* presigned: X-Amz-Expires */
    const char *date_header;         /* header form: the header the time came from */
    rd_buf_t q_algorithm, q_credential, q_date, q_expires, q_signed_headers, q_signature;
} sig_parts_t;

static void sig_parts_free(sig_parts_t *s)
{
    rd_buf_free(&s->q_algorithm);
    rd_buf_free(&s->q_credential);
    rd_buf_free(&s->q_date);
    rd_buf_free(&s->q_expires);
    rd_buf_free(&s->q_signed_headers);
    rd_buf_free(&s->q_signature);
}

static const rd_sqs_error_t *fail(const rd_sqs_error_t *err, char *why, size_t why_len,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static const rd_sqs_error_t *fail(const rd_sqs_error_t *err, char *why, size_t why_len,
                                  const char *fmt, ...)
{
    if (why != NULL && why_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return err;
}

static span_t span_of(const rd_buf_t *b)
{
    span_t s = { b->data != NULL ? b->data : "", b->len };
    return s;
}

static span_t trim(span_t s)
{
    while (s.len > 0 && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.len--;
    while (s.len > 0 && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t')) s.len--;
    return s;
}

/* "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." */
static const rd_sqs_error_t *parse_authorization(const char *auth, sig_parts_t *s, char *why,
                                                 size_t why_len)
{
    size_t alg_len = strcspn(auth, " \t");
    if (alg_len != strlen(ALGORITHM) || memcmp(auth, ALGORITHM, alg_len) != 0) {
        if (strncmp(auth, "AWS4-", 5) == 0)
            return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                        "Unsupported AWS 'algorithm': '%.*s'; only AWS4-HMAC-SHA256 is accepted",
                        (int)(alg_len > 64 ? 64 : alg_len), auth);
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "The Authorization header is not AWS Signature Version 4 (AWS4-HMAC-SHA256 "
                    "Credential=..., SignedHeaders=..., Signature=...)");
    }
    const char *p = auth + alg_len;
    bool have_cred = false, have_sh = false, have_sig = false;
    while (*p) {
        size_t n = strcspn(p, ",");
        span_t item = trim((span_t){ p, n });
        const char *eq = memchr(item.p, '=', item.len);
        if (eq != NULL) {
            span_t key = { item.p, (size_t)(eq - item.p) };
            span_t val = { eq + 1, item.len - key.len - 1 };
            if (span_eq(key, "Credential") && !have_cred) {
                s->credential = val;
                have_cred = true;
            } else if (span_eq(key, "SignedHeaders") && !have_sh) {
                s->signed_headers = val;
                have_sh = true;
            } else if (span_eq(key, "Signature") && !have_sig) {
                s->signature = val;
                have_sig = true;
            }
        }
        p += n;
        if (*p == ',') p++;
    }
    if (!have_cred || !have_sh || !have_sig)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len, "%s%s%s",
                    have_cred ? "" : "Authorization header requires 'Credential' parameter. ",
                    have_sh ? "" : "Authorization header requires 'SignedHeaders' parameter. ",
                    have_sig ? "" : "Authorization header requires 'Signature' parameter.");
    return NULL;
}

static const rd_sqs_error_t *parse_presigned(const rd_http_request_t *req, sig_parts_t *s,
                                             char *why, size_t why_len)
{
    bool all = query_get(req, "X-Amz-Algorithm", &s->q_algorithm) &&
               query_get(req, "X-Amz-Credential", &s->q_credential) &&
               query_get(req, "X-Amz-Signature", &s->q_signature) &&
               query_get(req, "X-Amz-Date", &s->q_date) &&
               query_get(req, "X-Amz-SignedHeaders", &s->q_signed_headers) &&
               query_get(req, "X-Amz-Expires", &s->q_expires);
    if (!all) return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len, "%s", MSG_PRESIGN_PARAMS);
    if (!span_eq(span_of(&s->q_algorithm), ALGORITHM))
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"");
    s->credential = span_of(&s->q_credential);
    s->signed_headers = span_of(&s->q_signed_headers);
    s->signature = span_of(&s->q_signature);
    span_t exp = span_of(&s->q_expires);
    if (exp.len == 0 || exp.len > 6 || !digits(exp.p, exp.len) ||
        num(exp.p, exp.len) > MAX_PRESIGN_EXPIRES_S)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "X-Amz-Expires must be a whole number of seconds, at most %d (a week)",
                    MAX_PRESIGN_EXPIRES_S);
    s->expires_s = num(exp.p, exp.len);
    if (!parse_amz_date(s->q_date.data, &s->time_s))
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
    memcpy(s->amz_date, s->q_date.data, AMZ_DATE_LEN + 1);
    return NULL;
}

/* The request time of the header form: X-Amz-Date, else Date. */
static const rd_sqs_error_t *header_date(const rd_http_request_t *req, sig_parts_t *s, char *why,
                                         size_t why_len)
{
    const char *v = rd_http_request_header(req, "x-amz-date");
    s->date_header = "x-amz-date";
    if (v == NULL) {
        v = rd_http_request_header(req, "date");
        s->date_header = "date";
    }
    if (v == NULL)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "Authorization header requires existence of either a 'X-Amz-Date' or a "
                    "'Date' header.");
    bool ok = s->date_header[0] == 'x' ? parse_amz_date(v, &s->time_s)
                                       : parse_http_date(v, &s->time_s);
    if (!ok)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "%s must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"%s",
                    s->date_header[0] == 'x' ? "X-Amz-Date" : "Date",
                    s->date_header[0] == 'x' ? "" : " or RFC 1123 (\"Wed, 02 Dec 2026 14:22:34 GMT\")");
    format_amz_date(s->time_s, s->amz_date);
    return NULL;
}

/* keyID/date/region/service/aws4_request */
static const rd_sqs_error_t *parse_credential(sig_parts_t *s, char *why, size_t why_len)
{
    span_t part[5];
    size_t n = 0;
    const char *p = s->credential.p, *end = p + s->credential.len;
    while (n < 5) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *stop = slash != NULL ? slash : end;
        part[n++] = (span_t){ p, (size_t)(stop - p) };
        if (slash == NULL) break;
        p = slash + 1;
    }
    bool ok = n == 5 && memchr(part[4].p, '/', part[4].len) == NULL;
    for (size_t i = 0; ok && i < 5; i++) ok = part[i].len > 0;
    if (!ok)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "Credential should have exactly 5 slash-delimited elements, e.g. "
                    "keyID/date/region/service/term, got '%.*s'",
                    (int)(s->credential.len > 200 ? 200 : s->credential.len), s->credential.p);
    s->akid = part[0];
    s->date8 = part[1];
    s->region = part[2];
    s->service = part[3];
    s->terminator = part[4];
    return NULL;
}

/* SignedHeaders: lower-case names, ';'-separated, sorted, each once, host
 * among them (and the date header of the header form). */
static const rd_sqs_error_t *check_signed_headers(const sig_parts_t *s, char *why, size_t why_len)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    span_t prev = { NULL, 0 };
    bool host = false, date = s->presigned;
    const char *p = s->signed_headers.p, *end = p + s->signed_headers.len;
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        span_t name = { p, (size_t)((semi != NULL ? semi : end) - p) };
        bool ok = name.len > 0;
        for (size_t i = 0; ok && i < name.len; i++) {
            char c = name.p[i];
            ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr(tchar, c) != NULL;
        }
        if (ok && prev.p != NULL) {
            size_t m = prev.len < name.len ? prev.len : name.len;
            int c = memcmp(prev.p, name.p, m);
            ok = c < 0 || (c == 0 && prev.len < name.len);
        }
        if (!ok)
            return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                        "SignedHeaders must be lower-case header names separated by ';', sorted, "
                        "each once, got '%.*s'",
                        (int)(s->signed_headers.len > 200 ? 200 : s->signed_headers.len),
                        s->signed_headers.p);
        host |= span_eq(name, "host");
        if (!s->presigned) date |= span_eq(name, s->date_header);
        prev = name;
        if (semi == NULL) break;
        p = semi + 1;
    }
    if (!host)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.");
    if (!date)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "'%s' must be a 'SignedHeader' in the AWS Authorization: the request time "
                    "has to be signed.",
                    s->date_header[0] == 'x' ? "X-Amz-Date" : "Date");
    return NULL;
}

/* The canonical request up to and including the signed headers line. */
static const rd_sqs_error_t *canonical_prefix(const rd_http_request_t *req, const sig_parts_t *s,
                                              rd_buf_t *out, char *why, size_t why_len)
{
    rd_buf_puts(out, rd_http_method_name(req->method));
    rd_buf_putc(out, '\n');
    canonical_uri(out, req->path != NULL ? req->path : "", req->path != NULL ? req->path_len : 0);
    rd_buf_putc(out, '\n');
    if (req->query != NULL) canonical_query(out, req->query, req->query_len, s->presigned);
    rd_buf_putc(out, '\n');
    const char *p = s->signed_headers.p, *end = p + s->signed_headers.len;
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        span_t name = { p, (size_t)((semi != NULL ? semi : end) - p) };
        if (!canonical_header(out, req, name))
            return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                        "The header '%.*s' is in SignedHeaders but not in the request.",
                        (int)(name.len > 100 ? 100 : name.len), name.p);
        if (semi == NULL) break;
        p = semi + 1;
    }
    rd_buf_putc(out, '\n');
    rd_buf_append(out, s->signed_headers.p, s->signed_headers.len);
    rd_buf_putc(out, '\n');
    return NULL;
}

/* Whether the signature given matches the one of canonical + payload. */
static bool signature_matches(const rd_sqs_key_t *key, const sig_parts_t *s,
                              const rd_buf_t *prefix, const char *payload)
{
    rd_buf_t creq = RD_BUF_INIT, sts = RD_BUF_INIT;
    rd_buf_append(&creq, prefix->data, prefix->len);
    rd_buf_puts(&creq, payload);
    char creq_hash[SHA256_HEX_LEN + 1], want[SHA256_HEX_LEN + 1];
    sha256_hex(creq.data, creq.len, creq_hash);
    rd_buf_printf(&sts, "%s\n%s\n%.*s/%.*s/%.*s/%s\n%s", ALGORITHM, s->amz_date,
                  (int)s->date8.len, s->date8.p, (int)s->region.len, s->region.p,
                  (int)s->service.len, s->service.p, TERMINATOR, creq_hash);
    sign(key, s->date8, s->region, s->service, &sts, want);
    rd_buf_free(&creq);
    rd_buf_free(&sts);
    if (s->signature.len != SHA256_HEX_LEN) return false;
    char given[SHA256_HEX_LEN];
    for (size_t i = 0; i < SHA256_HEX_LEN; i++) {
        char c = s->signature.p[i];
        given[i] = (c >= 'A' && c <= 'F') ? (char)(c - 'A' + 'a') : c;
    }
    return CRYPTO_memcmp(given, want, SHA256_HEX_LEN) == 0;
}

static bool is_hex64(const char *v)
{
    if (strlen(v) != SHA256_HEX_LEN) return false;
    for (size_t i = 0; i < SHA256_HEX_LEN; i++)
        if (rd_hex_digit(v[i]) < 0) return false;
    return true;
}

static const rd_sqs_error_t *check_time(const sig_parts_t *s, long long now_s, char *why,
                                        size_t why_len)
{
    char now[AMZ_DATE_LEN + 1], edge[AMZ_DATE_LEN + 1];
    format_amz_date(now_s, now);
    if (s->time_s > now_s + MAX_SKEW_S) {
        format_amz_date(now_s + MAX_SKEW_S, edge);
        return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                    "Signature not yet current: %s is still later than %s (%s + 15 min.)",
                    s->amz_date, edge, now);
    }
    if (!s->presigned && s->time_s < now_s - MAX_SKEW_S) {
        format_amz_date(now_s - MAX_SKEW_S, edge);
        return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                    "Signature expired: %s is now earlier than %s (%s - 15 min.)", s->amz_date,
                    edge, now);
    }
    if (s->presigned && now_s > s->time_s + s->expires_s) {
        format_amz_date(s->time_s + s->expires_s, edge);
        return fail(&RD_SQS_ERR_REQUEST_EXPIRED, why, why_len,
                    "Request has expired: the presigned URL of %s (X-Amz-Expires %lld s) expired "
                    "at %s; it is now %s.",
                    s->amz_date, s->expires_s, edge, now);
    }
    return NULL;
}

/* What the head alone tells: the form, the parts, the key, the time and
 * the scope; everything but the payload hash and the signature. */
static const rd_sqs_error_t *check_head(const rd_sqs_keys_t *keys, const rd_http_request_t *req,
                                        const char *service, long long now_s, sig_parts_t *s,
                                        const rd_sqs_key_t **key, char *why, size_t why_len)
{
    const char *auth = rd_http_request_header(req, "authorization");
    if (auth == NULL) auth = req->authorization;
    if (auth != NULL && *auth == '\0') auth = NULL;
    rd_buf_t probe = RD_BUF_INIT;
    bool presigned = query_get(req, "X-Amz-Algorithm", &probe) ||
                     query_get(req, "X-Amz-Credential", &probe) ||
                     query_get(req, "X-Amz-Signature", &probe);
    rd_buf_free(&probe);
    if (auth == NULL && !presigned)
        return fail(&RD_SQS_ERR_MISSING_AUTH_TOKEN, why, why_len,
                    "The request must contain either a valid (registered) AWS access key ID or "
                    "X.509 certificate.");
    if (auth != NULL && presigned)
        return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter "
                    "or the Authorization header should be specified");
    s->presigned = presigned;
    const rd_sqs_error_t *err = presigned ? parse_presigned(req, s, why, why_len)
                                          : parse_authorization(auth, s, why, why_len);
    if (err == NULL && !presigned) err = header_date(req, s, why, why_len);
    if (err == NULL) err = parse_credential(s, why, why_len);
    if (err == NULL) err = check_signed_headers(s, why, why_len);
    if (err != NULL) return err;

    *key = keys_find(keys, s->akid.p, s->akid.len);
    if (*key == NULL)
        return fail(&RD_SQS_ERR_INVALID_CLIENT_TOKEN_ID, why, why_len,
                    "The security token included in the request is invalid.");
    if ((err = check_time(s, now_s, why, why_len)) != NULL) return err;
    if (s->date8.len != 8 || memcmp(s->date8.p, s->amz_date, 8) != 0)
        return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                    "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of "
                    "date from HTTP: '%.*s' != '%.8s', from '%s'.",
                    (int)(s->date8.len > 32 ? 32 : s->date8.len), s->date8.p, s->amz_date,
                    s->amz_date);
    if (!span_eq(s->service, service))
        return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                    "Credential should be scoped to correct service: '%s'.", service);
    if (!span_eq(s->terminator, TERMINATOR))
        return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                    "Credential should be scoped with a valid terminator: 'aws4_request', not "
                    "'%.*s'.",
                    (int)(s->terminator.len > 32 ? 32 : s->terminator.len), s->terminator.p);
    return NULL;
}

static const rd_sqs_error_t *check(const rd_sqs_keys_t *keys, const rd_http_request_t *req,
                                   const char *service, long long now_s, sig_parts_t *s,
                                   const rd_sqs_key_t **key, char *why, size_t why_len)
{
    const rd_sqs_error_t *err = check_head(keys, req, service, now_s, s, key, why, why_len);
    if (err != NULL) return err;

    /* The payload hash: the body's own, always. x-amz-content-sha256 may
     * repeat it (then it is signed as given); UNSIGNED-PAYLOAD only with no
     * body, since SQS's parameters travel in the body. */
    char body_hash[SHA256_HEX_LEN + 1];
    sha256_hex(req->body != NULL ? req->body : "", req->body_len, body_hash);
    const char *payload = body_hash, *alternative = NULL;
    const char *given = rd_http_request_header(req, "x-amz-content-sha256");
    if (given != NULL) {
        if (strcmp(given, UNSIGNED_PAYLOAD) == 0) {
            if (req->body_len > 0)
                return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                            "x-amz-content-sha256 UNSIGNED-PAYLOAD is not accepted for a request "
                            "with a body: sign the payload");
            payload = UNSIGNED_PAYLOAD;
        } else if (!is_hex64(given)) {
            return fail(&RD_SQS_ERR_INCOMPLETE_SIGNATURE, why, why_len,
                        "x-amz-content-sha256 must be the SHA-256 of the body in hex");
        } else if (strcasecmp(given, body_hash) != 0) {
            return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len,
                        "The provided 'x-amz-content-sha256' header does not match what was "
                        "computed.");
        } else {
            payload = given;
        }
    } else if (s->presigned && req->body_len == 0) {
        /* botocore's SigV4QueryAuth signs the empty body's hash, S3-style
         * presigners UNSIGNED-PAYLOAD; with no body both say the same. */
        alternative = UNSIGNED_PAYLOAD;
    }

    rd_buf_t prefix = RD_BUF_INIT;
    err = canonical_prefix(req, s, &prefix, why, why_len);
    bool good = err == NULL && (signature_matches(*key, s, &prefix, payload) ||
                                (alternative != NULL &&
                                 signature_matches(*key, s, &prefix, alternative)));
    rd_buf_free(&prefix);
    if (err != NULL) return err;
    if (!good) return fail(&RD_SQS_ERR_SIGNATURE_DOES_NOT_MATCH, why, why_len, "%s", MSG_MISMATCH);
    return NULL;
}

const rd_sqs_error_t *rd_sqs_sigv4_check_service(const rd_sqs_keys_t *keys,
                                                  const rd_http_request_t *req, const char *service,
                                                  long long now_s, const rd_sqs_key_t **key,
                                                  char *why, size_t why_len)
{
    sig_parts_t s;
    memset(&s, 0, sizeof s);
    const rd_sqs_key_t *found = NULL;
    const rd_sqs_error_t *err = check(keys, req, service, now_s, &s, &found, why, why_len);
    sig_parts_free(&s);
    if (key != NULL) *key = err == NULL ? found : NULL;
    if (err == NULL && why != NULL && why_len > 0) why[0] = '\0';
    return err;
}

const rd_sqs_error_t *rd_sqs_sigv4_check(const rd_sqs_keys_t *keys, const rd_http_request_t *req,
                                          long long now_s, const rd_sqs_key_t **key, char *why,
                                          size_t why_len)
{
    return rd_sqs_sigv4_check_service(keys, req, "sqs", now_s, key, why, why_len);
}

const rd_sqs_error_t *rd_sqs_sigv4_check_head(const rd_sqs_keys_t *keys,
                                               const rd_http_request_t *req, long long now_s,
                                               char *why, size_t why_len)
{
    sig_parts_t s;
    memset(&s, 0, sizeof s);
    const rd_sqs_key_t *found = NULL;
    const rd_sqs_error_t *err = check_head(keys, req, "sqs", now_s, &s, &found, why, why_len);
    sig_parts_free(&s);
    return err;
}
