/* json.c - JSON documents on top of cJSON. */
#include "retryd/json.h"

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/utf8.h"

#define AS_C(j) ((cJSON *)(j))
#define AS_RD(c) ((rd_json_t *)(c))

/* Finds "\u0000" escapes: backslash pairs are skipped so "\\u0000" (an escaped
 * backslash followed by text) does not count. With mark, each one found is
 * rewritten to "\u0001" in place. */
static bool find_nul_escapes(char *text, size_t len, bool mark)
{
    bool found = false;
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) {
            found = true;
            if (!mark) return true;
            text[i + 5] = '1';
        }
        i++;
    }
    return found;
}

/* The value of the 4 hex digits at p, or -1. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Scans text for \uD800-\uDFFF escapes that are not half of a surrogate pair.
 * cJSON refuses the whole document for one, although it is JSON syntax: it is
 * a string that is not Unicode text, which validation must refuse by field.
 * With out, text is copied there with each such escape written as the three
 * bytes of its code unit (ED xx xx), which the UTF-8 check then refuses.
 * Returns whether there was one. */
static bool lone_surrogates(const char *text, size_t len, rd_buf_t *out)
{
    bool found = false;
    size_t copied = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] != '\\') continue;
        long v = text[i + 1] == 'u' && i + 6 <= len ? hex4(text + i + 2) : -1;
        if (v < 0xD800 || v > 0xDFFF) {
            i++;  /* any other escape, including "\\" */
            continue;
        }
        if (v <= 0xDBFF && i + 12 <= len && text[i + 6] == '\\' && text[i + 7] == 'u') {
            long low = hex4(text + i + 8);
            if (low >= 0xDC00 && low <= 0xDFFF) {
                i += 11;  /* a pair */
                continue;
            }
        }
        found = true;
        if (out == NULL) return true;
        char bytes[3] = { (char)(0xE0 | (v >> 12)), (char)(0x80 | ((v >> 6) & 0x3F)),
                          (char)(0x80 | (v & 0x3F)) };
        rd_buf_append(out, text + copied, i - copied);
        rd_buf_append(out, bytes, 3);
        copied = i + 6;
        i += 5;
    }
    if (out && found) rd_buf_append(out, text + copied, len - copied);
    return found;
}

/* Length of the JSON number at p[0..n) (RFC 8259 6: -?(0|[1-9][0-9]*)
 * (.[0-9]+)?([eE][+-]?[0-9]+)?), or 0 when p does not start one. */
static size_t number_length(const char *p, size_t n)
{
    size_t i = 0;
#define DIGIT(k) ((k) < n && p[k] >= '0' && p[k] <= '9')
    if (i < n && p[i] == '-') i++;
    if (!DIGIT(i)) return 0;
    if (p[i] == '0') i++;
    else while (DIGIT(i)) i++;
    if (i < n && p[i] == '.') {
        if (!DIGIT(i + 1)) return 0;
        for (i++; DIGIT(i); i++) {}
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (!DIGIT(i)) return 0;
        while (DIGIT(i)) i++;
    }
#undef DIGIT
    return i;
}

/* What strict JSON (RFC 8259) refuses and cJSON takes: a raw control byte
 * (U+0000-U+001F) inside a string, where a NUL would cut it short; one
 * outside a string other than the four whitespace bytes (cJSON skips every
 * byte up to space); a number that is not in JSON's grammar (leading zeros
 * "010", "1.", ".5", "+1"). cJSON still checks the rest of the syntax. */
static bool strict_json(const char *text, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (in_string) {
            if (c < 0x20) return false;
            if (c == '\\') {
                /* The escaped byte is checked and skipped: \" does not end the string. */
                if (++i < len && (unsigned char)text[i] < 0x20) return false;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c < 0x20) {
            if (c != '\t' && c != '\n' && c != '\r') return false;
        } else if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) {
            size_t n = number_length(text + i, len - i);
            if (n == 0) return false;
            i += n;
            /* A number runs to the next delimiter: "01", "1.2.3", "1e5e" are one bad token. */
            if (i < len && (text[i] == '.' || text[i] == '+' || text[i] == '-' ||
                            text[i] == 'e' || text[i] == 'E' || (text[i] >= '0' && text[i] <= '9')))
                return false;
            i--;
        }
    }
    return true;
}

rd_json_t *rd_json_parse(const char *text, size_t len, bool *has_nul)
{
    if (!strict_json(text, len)) return NULL;
    rd_buf_t rewritten = RD_BUF_INIT;
    if (lone_surrogates(text, len, NULL)) {
        lone_surrogates(text, len, &rewritten);
        text = rewritten.data;
        len = rewritten.len;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, false);
    /* Only whitespace may follow the value. */
    for (const char *p = end; doc && p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            cJSON_Delete(doc);
            doc = NULL;
        }
    }
    if (doc && has_nul) *has_nul = find_nul_escapes((char *)(uintptr_t)text, len, false);
    rd_buf_free(&rewritten);
    return AS_RD(doc);
}

rd_json_t *rd_json_parse_nul_marked(const char *text, size_t len)
{
    char *copy = rd_strndup(text, len);
    find_nul_escapes(copy, len, true);
    rd_json_t *doc = rd_json_parse(copy, len, NULL);
    rd_free(copy);
    return doc;
}

void rd_json_free(rd_json_t *doc)
{
    cJSON_Delete(AS_C(doc));
}

struct cJSON *rd_json_cjson(rd_json_t *doc)
{
    return AS_C(doc);
}

bool rd_json_is_object(const rd_json_t *j) { return j && cJSON_IsObject(AS_C(j)); }
bool rd_json_is_array(const rd_json_t *j) { return j && cJSON_IsArray(AS_C(j)); }
bool rd_json_is_string(const rd_json_t *j) { return j && cJSON_IsString(AS_C(j)); }
bool rd_json_is_null(const rd_json_t *j) { return j && cJSON_IsNull(AS_C(j)); }
bool rd_json_is_bool(const rd_json_t *j) { return j && cJSON_IsBool(AS_C(j)); }

rd_json_t *rd_json_get(const rd_json_t *obj, const char *name)
{
    if (!rd_json_is_object(obj)) return NULL;
    return AS_RD(cJSON_GetObjectItemCaseSensitive(AS_C(obj), name));
}

const char *rd_json_string(const rd_json_t *j)
{
    return rd_json_is_string(j) ? AS_C(j)->valuestring : NULL;
}

bool rd_json_bool(const rd_json_t *j)
{
    return j && cJSON_IsTrue(AS_C(j));
}

bool rd_json_integer(const rd_json_t *j, long long *out)
{
    if (j == NULL || !cJSON_IsNumber(AS_C(j))) return false;
    double v = AS_C(j)->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0) return false;
    *out = (long long)v;
    return true;
}

size_t rd_json_object_size(const rd_json_t *obj)
{
    return rd_json_is_object(obj) ? (size_t)cJSON_GetArraySize(AS_C(obj)) : 0;
}

const char *rd_json_object_key_at(const rd_json_t *obj, size_t i)
{
    if (!rd_json_is_object(obj)) return NULL;
    const cJSON *m = cJSON_GetArrayItem(AS_C(obj), (int)i);
    return m ? m->string : NULL;
}

bool rd_json_number(const rd_json_t *j, double *out)
{
    if (j == NULL || !cJSON_IsNumber(AS_C(j)) || !isfinite(AS_C(j)->valuedouble)) return false;
    *out = AS_C(j)->valuedouble;
    return true;
}

size_t rd_json_array_size(const rd_json_t *j)
{
    return rd_json_is_array(j) ? (size_t)cJSON_GetArraySize(AS_C(j)) : 0;
}

rd_json_t *rd_json_array_at(const rd_json_t *j, size_t i)
{
    return rd_json_is_array(j) ? AS_RD(cJSON_GetArrayItem(AS_C(j), (int)i)) : NULL;
}

rd_json_t *rd_json_array_first(const rd_json_t *j)
{
    return rd_json_is_array(j) ? AS_RD(AS_C(j)->child) : NULL;
}

rd_json_t *rd_json_next(const rd_json_t *item)
{
    return item ? AS_RD(AS_C(item)->next) : NULL;
}

rd_json_t *rd_json_new_object(void) { return AS_RD(cJSON_CreateObject()); }
rd_json_t *rd_json_new_array(void) { return AS_RD(cJSON_CreateArray()); }

void rd_json_set(rd_json_t *obj, const char *name, rd_json_t *item)
{
    cJSON_AddItemToObject(AS_C(obj), name, AS_C(item));
}

void rd_json_set_string(rd_json_t *obj, const char *name, const char *value)
{
    size_t len = strlen(value);
    if (!rd_utf8_valid(value, len)) {
        rd_json_set_stringn(obj, name, value, len);
        return;
    }
    cJSON_AddItemToObject(AS_C(obj), name, cJSON_CreateString(value));
}

/* cJSON strings end at the first NUL, so a value with NUL bytes is written as
 * raw JSON text: each NUL-free piece escaped by cJSON, joined by \u0000. */
static cJSON *create_binary_string(const char *value, size_t len)
{
    rd_buf_t raw = RD_BUF_INIT;
    rd_buf_putc(&raw, '"');
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && value[i] != '\0') continue;
        char *piece = rd_strndup(value + start, i - start);
        cJSON *tmp = cJSON_CreateString(piece);
        char *quoted = cJSON_PrintUnformatted(tmp);
        rd_buf_append(&raw, quoted + 1, strlen(quoted) - 2);  /* without its quotes */
        rd_free(quoted);
        cJSON_Delete(tmp);
        rd_free(piece);
        if (i < len) rd_buf_puts(&raw, "\\u0000");
        start = i + 1;
    }
    rd_buf_putc(&raw, '"');
    cJSON *item = cJSON_CreateRaw(raw.data);
    rd_buf_free(&raw);
    return item;
}

void rd_json_set_stringn(rd_json_t *obj, const char *name, const char *value, size_t len)
{
    /* Text stored before the API checked it (or written with redis-cli) may
     * not be UTF-8; JSON must be: such bytes are written as U+FFFD. */
    rd_buf_t repaired = RD_BUF_INIT;
    if (!rd_utf8_valid(value, len)) {
        rd_utf8_repair(value, len, &repaired);
        value = repaired.data;
        len = repaired.len;
    }
    if (memchr(value, '\0', len) != NULL) {
        cJSON_AddItemToObject(AS_C(obj), name, create_binary_string(value, len));
    } else {
        char *copy = rd_strndup(value, len);
        cJSON_AddItemToObject(AS_C(obj), name, cJSON_CreateString(copy));
        rd_free(copy);
    }
    rd_buf_free(&repaired);
}

/* Integers go in as raw text: cJSON prints every number with "%1.15g" and
 * reads it back with sscanf to check it, a tenth of retryd's CPU per message. */
/* An integer as a raw node: exact for every long long (a double is not). */
static cJSON *int_node(long long value)
{
    char digits[24];
    char *p = digits + sizeof digits - 1;
    *p = '\0';
    unsigned long long v = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (value < 0) *--p = '-';
    return cJSON_CreateRaw(p);
}

void rd_json_set_int(rd_json_t *obj, const char *name, long long value)
{
    cJSON_AddItemToObject(AS_C(obj), name, int_node(value));
}

rd_json_t *rd_json_new_int(long long value)
{
    return (rd_json_t *)int_node(value);
}

void rd_json_set_bool(rd_json_t *obj, const char *name, bool value)
{
    cJSON_AddItemToObject(AS_C(obj), name, cJSON_CreateBool(value));
}

void rd_json_set_null(rd_json_t *obj, const char *name)
{
    cJSON_AddItemToObject(AS_C(obj), name, cJSON_CreateNull());
}

void rd_json_append(rd_json_t *array, rd_json_t *item)
{
    cJSON_AddItemToArray(AS_C(array), AS_C(item));
}

char *rd_json_print(const rd_json_t *j, size_t *len)
{
    char *text = cJSON_PrintUnformatted(AS_C(j));
    if (text == NULL) text = rd_strdup("null");  /* cJSON fails only on OOM, which aborts */
    if (len) *len = strlen(text);
    return text;
}
