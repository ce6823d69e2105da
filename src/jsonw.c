/* jsonw.c - the streaming JSON writer. */
#include "retryd/jsonw.h"

#include <assert.h>
#include <string.h>

#include "retryd/utf8.h"

void rd_jsonw_init(rd_jsonw_t *w, rd_buf_t *out)
{
    w->out = out;
    w->depth = 0;
    w->after_key = false;
    w->has_item[0] = false;
}

/* The comma before a value or a key, when it is not the first of its level. */
static void separate(rd_jsonw_t *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->has_item[w->depth]) rd_buf_putc(w->out, ',');
    w->has_item[w->depth] = true;
}

static void open_level(rd_jsonw_t *w, char c)
{
    separate(w);
    assert(w->depth < RD_JSONW_MAX_DEPTH);
    rd_buf_putc(w->out, c);
    w->has_item[++w->depth] = false;
}

static void close_level(rd_jsonw_t *w, char c)
{
    assert(w->depth > 0 && !w->after_key);
    w->depth--;
    rd_buf_putc(w->out, c);
}

void rd_jsonw_object_open(rd_jsonw_t *w) { open_level(w, '{'); }
void rd_jsonw_object_close(rd_jsonw_t *w) { close_level(w, '}'); }
void rd_jsonw_array_open(rd_jsonw_t *w) { open_level(w, '['); }
void rd_jsonw_array_close(rd_jsonw_t *w) { close_level(w, ']'); }

/* s[0..len) as a JSON string's contents (see jsonw.h for the rules). */
static void put_escaped(rd_buf_t *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    rd_buf_reserve(out, len + 2);
    size_t run = 0, i = 0;  /* s[run..i) is plain and not yet copied */
    while (i < len) {
        unsigned char b = u[i];
        if (b >= 0x20 && b != '"' && b != '\\' && b < 0x80) {
            i++;
            continue;
        }
        if (b >= 0x80) {
            unsigned cp;
            size_t n = rd_utf8_sequence(u + i, len - i, &cp);
            if (n > 0) {
                i += n;
                continue;
            }
            rd_buf_append(out, s + run, i - run);
            rd_buf_append(out, "\xEF\xBF\xBD", 3);
            run = ++i;
            continue;
        }
        rd_buf_append(out, s + run, i - run);
        char esc[6] = { '\\', 0, 0, 0, 0, 0 };
        size_t esc_len = 2;
        switch (b) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[b >> 4];
            esc[5] = hex[b & 0xF];
            esc_len = 6;
        }
        rd_buf_append(out, esc, esc_len);
        run = ++i;
    }
    rd_buf_append(out, s + run, len - run);
}

void rd_jsonw_key(rd_jsonw_t *w, const char *name)
{
    assert(!w->after_key);
    separate(w);
    rd_buf_putc(w->out, '"');
    put_escaped(w->out, name, strlen(name));
    rd_buf_append(w->out, "\":", 2);
    w->after_key = true;
}

void rd_jsonw_stringn(rd_jsonw_t *w, const char *s, size_t len)
{
    separate(w);
    rd_buf_putc(w->out, '"');
    put_escaped(w->out, s, len);
    rd_buf_putc(w->out, '"');
}

void rd_jsonw_string(rd_jsonw_t *w, const char *s) { rd_jsonw_stringn(w, s, strlen(s)); }

void rd_jsonw_plain_string(rd_jsonw_t *w, const char *s, size_t len)
{
    separate(w);
    rd_buf_reserve(w->out, len + 2);
    rd_buf_putc(w->out, '"');
    rd_buf_append(w->out, s, len);
    rd_buf_putc(w->out, '"');
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
