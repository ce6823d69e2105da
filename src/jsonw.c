/* jsonw.c - the streaming JSON writer. */
#include "retryd/jsonw.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/utf8.h"

void rd_jsonw_init(rd_jsonw_t *w, rd_buf_t *out)
{
    w->out = out;
    w->depth = 0;
    w->after_key = false;
    w->has_item[0] = false;
}

/* One byte appended (the hot single bytes: commas, quotes, brackets). */
static void put_byte(rd_buf_t *b, char c)
{
    if (b->len + 2 > b->cap) rd_buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

/* The comma before a value or a key, when it is not the first of its level. */
static void separate(rd_jsonw_t *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->has_item[w->depth]) put_byte(w->out, ',');
    w->has_item[w->depth] = true;
}

static void open_level(rd_jsonw_t *w, char c)
{
    separate(w);
    assert(w->depth < RD_JSONW_MAX_DEPTH);
    put_byte(w->out, c);
    w->has_item[++w->depth] = false;
}

static void close_level(rd_jsonw_t *w, char c)
{
    assert(w->depth > 0 && !w->after_key);
    w->depth--;
    put_byte(w->out, c);
}

void rd_jsonw_object_open(rd_jsonw_t *w) { open_level(w, '{'); }
void rd_jsonw_object_close(rd_jsonw_t *w) { close_level(w, '}'); }
void rd_jsonw_array_open(rd_jsonw_t *w) { open_level(w, '['); }
void rd_jsonw_array_close(rd_jsonw_t *w) { close_level(w, ']'); }

/* s[0..len) as a JSON string, quotes included (see jsonw.h for the rules),
 * written in place: the buffer always has room for the rest of the input
 * copied as it is plus the closing quote, and grows only for an escape. */
static void put_quoted(rd_buf_t *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    rd_buf_reserve(out, len + 2);
    char *p = out->data + out->len;
    const char *end = out->data + out->cap - 1;   /* the last byte is the NUL's */
    *p++ = '"';
    size_t i = 0;
    while (i < len) {
        unsigned char b = u[i];
        if (b >= 0x20 && b < 0x80 && b != '"' && b != '\\') {
            *p++ = (char)b;
            i++;
            continue;
        }
        unsigned cp;
        size_t n = b >= 0x80 ? rd_utf8_sequence(u + i, len - i, &cp) : 0;
        if (n > 0) {  /* valid multi-byte text, copied as it is */
            memcpy(p, s + i, n);
            p += n;
            i += n;
            continue;
        }
        /* up to 6 bytes for this one, then the rest and the closing quote */
        if ((size_t)(end - p) < 6 + (len - i) + 1) {
            out->len = (size_t)(p - out->data);
            rd_buf_reserve(out, 6 + (len - i) + 1);
            p = out->data + out->len;
            end = out->data + out->cap - 1;
        }
        i++;
        if (b >= 0x80) {  /* not the start of a valid sequence: U+FFFD */
            memcpy(p, "\xEF\xBF\xBD", 3);
            p += 3;
            continue;
        }
        *p++ = '\\';
        switch (b) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\b': *p++ = 'b'; break;
        case '\f': *p++ = 'f'; break;
        case '\n': *p++ = 'n'; break;
        case '\r': *p++ = 'r'; break;
        case '\t': *p++ = 't'; break;
        default:
            *p++ = 'u';
            *p++ = '0';
            *p++ = '0';
            *p++ = hex[b >> 4];
            *p++ = hex[b & 0xF];
        }
    }
    *p++ = '"';
    out->len = (size_t)(p - out->data);
    *p = '\0';
}

void rd_jsonw_key(rd_jsonw_t *w, const char *name)
{
    assert(!w->after_key);
    separate(w);
    put_quoted(w->out, name, strlen(name));
    put_byte(w->out, ':');
    w->after_key = true;
}

void rd_jsonw_stringn(rd_jsonw_t *w, const char *s, size_t len)
{
    separate(w);
    put_quoted(w->out, s, len);
}

void rd_jsonw_string(rd_jsonw_t *w, const char *s) { rd_jsonw_stringn(w, s, strlen(s)); }

void rd_jsonw_plain_string(rd_jsonw_t *w, const char *s, size_t len)
{
    separate(w);
    rd_buf_reserve(w->out, len + 2);
    put_byte(w->out, '"');
    rd_buf_append(w->out, s, len);
    put_byte(w->out, '"');
}

void rd_jsonw_int(rd_jsonw_t *w, long long v)
{
    char digits[24];
    char *end = digits + sizeof digits, *p = end;
    unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    if (v < 0) *--p = '-';
    separate(w);
    rd_buf_append(w->out, p, (size_t)(end - p));
}

void rd_jsonw_bool(rd_jsonw_t *w, bool v)
{
    separate(w);
    if (v) rd_buf_append(w->out, "true", 4);
    else rd_buf_append(w->out, "false", 5);
}

void rd_jsonw_null(rd_jsonw_t *w)
{
    separate(w);
    rd_buf_append(w->out, "null", 4);
}

void rd_jsonw_number(rd_jsonw_t *w, double v)
{
    char text[40];
    int n = snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v) n = snprintf(text, sizeof text, "%.17g", v);
    separate(w);
    rd_buf_append(w->out, text, (size_t)n);
}
